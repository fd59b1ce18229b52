"""/api/v1/arrays: submit a job array, list arrays, show one, find a task, cancel them all."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from gpupool.api.deps import Caller, Ctx, Submissions
from gpupool.api.params import IdempotencyKey
from gpupool.api.routers.jobs import show as show_job
from gpupool.api.schemas.arrays import ArrayOut, ArraySubmitRequest
from gpupool.api.schemas.jobs import JobDetail
from gpupool.domain import bounds
from gpupool.domain.arrays import MAX_ARRAY_INDEX, ArraySpec
from gpupool.domain.jobs import JobSpec
from gpupool.usecases import arrays as array_service

router = APIRouter(prefix="/api/v1/arrays", tags=["arrays"])
ArrayId = Annotated[int, Path(ge=1, le=bounds.MAX_ID, description="an array id: the job id of its first task")]


@router.post("", status_code=201, response_model=ArrayOut)
def submit(
    body: ArraySubmitRequest,
    group: Submissions,
    who: Caller,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> ArrayOut:
    """One job per index, accepted as one record (in the group commit of ``POST /jobs``) whose
    other tasks are written just after, before any are scheduled or listed; each task is a job of
    its own (its id, logs, restarts) told its index in ``GPUPOOL_ARRAY_INDEX``. Good requests are
    answered by the plain route (``api/fast_submit.py``), the same way."""
    array = ArraySpec.parse(body.array)
    spec = JobSpec.create(**body.model_dump(exclude={"array"}))
    made, replayed = group.submit_array(spec, array, who, idempotency_key)
    response.headers["Location"] = f"/api/v1/arrays/{made.first.id}"
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return ArrayOut.of(made)


@router.get("", response_model=list[ArrayOut])
def listing(
    ctx: Ctx,
    who: Caller,
    response: Response,
    all: bool = Query(False, description="include arrays whose tasks all finished"),
    limit: int = Query(1000, ge=1, le=100_000, description="at most this many, the newest"),
    user: str | None = Query(None, max_length=64, description="only the arrays this user submitted"),
) -> list[ArrayOut]:
    arrays, total = array_service.listing(ctx, who, include_finished=all, limit=limit, user=user)
    response.headers["X-Total-Count"] = str(total)
    return [ArrayOut.of(a, full=sees) for a, sees in arrays]


@router.get("/{array_id}", response_model=ArrayOut)
def show(array_id: ArrayId, ctx: Ctx, who: Caller) -> ArrayOut:
    """The array with counts by state and every task's id and state (``task_list``)."""
    summary, tasks, sees = array_service.show(ctx, array_id, who)
    return ArrayOut.of(summary, full=sees, tasks=tasks)


@router.get("/{array_id}/tasks/{index}", response_model=JobDetail)
def task(
    array_id: ArrayId,
    index: Annotated[int, Path(ge=0, le=MAX_ARRAY_INDEX, description="the task's index")],
    request: Request,
    ctx: Ctx,
    who: Caller,
) -> JobDetail:
    """One task as a job (``ID_INDEX`` in the CLI), as ``GET /jobs/{id}`` shows it."""
    return show_job(array_service.task(ctx, array_id, index), request, ctx, who)


@router.post("/{array_id}/cancel", response_model=ArrayOut)
def cancel(array_id: ArrayId, ctx: Ctx, who: Caller, response: Response) -> ArrayOut:
    """Cancel every task not finished yet: pending ones at once, running ones are stopped.
    ``X-Cancelled-Count`` says how many."""
    summary, cancelled = array_service.cancel(ctx, array_id, who)
    response.headers["X-Cancelled-Count"] = str(cancelled)
    return ArrayOut.of(summary)

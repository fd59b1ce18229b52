"""/api/v1/jobs: submit, list, show, cancel, why, logs."""

from __future__ import annotations

from fastapi import APIRouter, Query, Response

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.jobs import EventOut, JobDetail, JobOut, SubmitRequest, WhyOut
from gpupool.domain.jobs import JobSpec
from gpupool.services import jobs as job_service

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


@router.post("", status_code=201, response_model=JobOut)
def submit(body: SubmitRequest, ctx: Ctx, who: Caller) -> JobOut:
    spec = JobSpec.create(**body.model_dump())
    return JobOut.of(job_service.submit(ctx, spec, who))


@router.get("", response_model=list[JobOut])
def listing(
    ctx: Ctx,
    who: Caller,
    response: Response,
    all: bool = Query(False, description="include finished jobs"),
    limit: int = Query(1000, description="at most this many, the newest; X-Total-Count says how many exist"),
) -> list[JobOut]:
    jobs, total = job_service.listing(ctx, include_finished=all, limit=limit)
    response.headers["X-Total-Count"] = str(total)
    return [JobOut.of(j) for j in jobs]


@router.get("/{job_id}", response_model=JobDetail)
def show(job_id: int, ctx: Ctx, who: Caller) -> JobDetail:
    job = job_service.get(ctx, job_id)
    events = [EventOut.of(e) for e in job_service.events(ctx, job_id)]
    return JobDetail(**JobOut.of(job).model_dump(), events=events)


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: int, ctx: Ctx, who: Caller) -> JobOut:
    return JobOut.of(job_service.cancel(ctx, job_id, who))


@router.get("/{job_id}/why", response_model=WhyOut)
def why(job_id: int, ctx: Ctx, who: Caller) -> WhyOut:
    answer = job_service.why(ctx, job_id)
    return WhyOut(
        id=job_id,
        state=answer.job.state.value,
        reason_code=answer.code,
        reason=answer.message,
        estimated_start=answer.estimated_start,
    )


@router.get(
    "/{job_id}/logs",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "log bytes from offset"}},
)
def logs(job_id: int, ctx: Ctx, who: Caller, worker: int = 0, offset: int = 0) -> Response:
    chunk = job_service.logs(ctx, job_id, worker, offset)
    return Response(
        content=chunk.data,
        media_type="text/plain; charset=utf-8",
        headers={"X-Gpupool-Next-Offset": str(chunk.next_offset), "X-Gpupool-Finished": "1" if chunk.finished else "0"},
    )

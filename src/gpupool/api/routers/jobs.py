"""/api/v1/jobs: submit, list, show, cancel, why, logs."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response

from gpupool.api import auditing
from gpupool.api.deps import Caller, Ctx, Submissions
from gpupool.api.params import IdempotencyKey, JobId, LogOffset, WorkerIndex
from gpupool.api.schemas.arrays import BatchRequest
from gpupool.api.schemas.jobs import EventOut, JobDetail, JobOut, SubmitRequest, WhyOut, WidthOut
from gpupool.api.schemas.services import job_path
from gpupool.domain import bounds
from gpupool.domain.bounds import MAX_ID
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec
from gpupool.usecases import jobs as job_service

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


@router.post("", status_code=201, response_model=JobOut)
async def submit(
    body: SubmitRequest,
    group: Submissions,
    who: Caller,
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    """With an ``Idempotency-Key``, a retry of a submission whose answer was lost returns the job
    the first one made (``Idempotent-Replayed: true``) instead of making another. Acknowledged
    once committed; submissions that arrive together share one commit, which the request awaits
    on the event loop rather than in a thread (usecases/group_commit.py)."""
    spec = JobSpec.create(**body.model_dump())
    noted = auditing.in_transaction(request.scope)  # its audit entry goes in with the job
    job, replayed = await group.submit_async(spec, who, idempotency_key, noted)
    auditing.written(request.scope, noted)
    response.headers["Location"] = f"/api/v1/jobs/{job.id}"  # the audit log's target, too
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return JobOut.of(job)


@router.post(":batch", status_code=201, response_model=list[JobOut])
def submit_batch(body: BatchRequest, group: Submissions, who: Caller) -> list[JobOut]:
    """Up to 1,000 jobs in one request and one transaction, all or none: for scripts that would
    otherwise send one request per job. A job refused refuses the batch; the error names it. The
    batch joins the group commit of ``POST /jobs``, as one submission."""
    specs = []
    for n, job in enumerate(body.jobs):
        try:
            specs.append(JobSpec.create(**job.model_dump()))
        except InvalidInput as exc:
            raise InvalidInput(f"jobs[{n}]: {exc.message}", code=exc.code) from None
    return [JobOut.of(job) for job in group.submit_batch(specs, who)]


@router.get("", response_model=list[JobOut])
def listing(
    ctx: Ctx,
    who: Caller,
    response: Response,
    all: bool = Query(False, description="include finished jobs"),
    limit: int = Query(
        1000,
        ge=1,
        le=bounds.MAX_LISTING,
        description="at most this many, the newest; X-Total-Count says how many exist",
    ),
    user: str | None = Query(None, max_length=64, description="only the jobs this user submitted (their owner)"),
    tasks: bool = Query(True, description="false: leave out the tasks of arrays (GET /arrays lists those)"),
) -> list[JobOut]:
    jobs, total = job_service.listing(ctx, who, include_finished=all, limit=limit, user=user, tasks=tasks)
    response.headers["X-Total-Count"] = str(total)
    return [JobOut.of(j, full=sees) for j, sees in jobs]


@router.get("/{job_id}", response_model=JobDetail)
def show(job_id: JobId, request: Request, ctx: Ctx, who: Caller) -> JobDetail:
    """The job with its newest 1,000 events (``events_total`` says how many it has; page through
    them all with ``/events``), and with ``--expose`` the gateway's URL of its port."""
    job, sees, events, total = job_service.show(ctx, job_id, who)
    detail = JobOut.of(job, full=sees).model_dump()
    if job.spec.expose is not None:
        detail["url"] = ctx.gateway.url(str(request.base_url), job_path(job.id))
    if job.spec.elastic:
        detail["width"] = [WidthOut(time=at, workers=n) for at, n in job_service.width(ctx, job.id)]
    return JobDetail(**detail, events=[EventOut.of(e) for e in events], events_total=total)


@router.get("/{job_id}/events", response_model=list[EventOut])
def events(
    job_id: JobId,
    ctx: Ctx,
    who: Caller,
    after: int = Query(0, ge=0, le=MAX_ID, description="only events after this event id"),
    limit: int = Query(1000, ge=1, le=job_service.MAX_EVENTS_PAGE, description="at most this many"),
) -> list[EventOut]:
    """A job's events in order, a page at a time: pass the last ``id`` seen as ``after``."""
    return [EventOut.of(e) for e in job_service.events(ctx, job_id, after, limit)]


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: JobId, ctx: Ctx, who: Caller) -> JobOut:
    return JobOut.of(job_service.cancel(ctx, job_id, who))


@router.get("/{job_id}/why", response_model=WhyOut)
def why(job_id: JobId, ctx: Ctx, who: Caller) -> WhyOut:
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
def logs(job_id: JobId, ctx: Ctx, who: Caller, worker: WorkerIndex = 0, offset: LogOffset = 0) -> Response:
    chunk = job_service.logs(ctx, job_id, who, worker, offset)
    return Response(
        content=chunk.data,
        media_type="text/plain; charset=utf-8",
        headers={"X-Gpupool-Next-Offset": str(chunk.next_offset), "X-Gpupool-Finished": "1" if chunk.finished else "0"},
    )

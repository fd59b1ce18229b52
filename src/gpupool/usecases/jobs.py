"""Job use cases. A submission is committed before the caller hears back (DESIGN §6)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.elastic import MAX_WORKERS, width_over_time
from gpupool.domain.errors import InvalidInput, NotFound, Stale
from gpupool.domain.jobs import JobSpec, JobState, Priority
from gpupool.domain.records import Event, JobRecord
from gpupool.domain.users import check_user_name
from gpupool.scheduler.estimate import estimate_start
from gpupool.store import arrays as array_repo
from gpupool.store import bulk
from gpupool.store import jobs as job_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database
from gpupool.store.images import IMAGE_EVENT
from gpupool.store.snapshot import load_snapshot
from gpupool.store.tokens import Principal
from gpupool.usecases.access import Visibility, require_job
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit

MAX_LIST = 100_000


def submit(ctx: HeadContext, spec: JobSpec, who: Principal) -> JobRecord:
    """One job, through a group commit of its own: the checks and the writes that ``POST /jobs``
    takes (the API shares one group commit among its requests; a use case here has nobody to share with)."""
    return GroupCommit(ctx).submit(spec, who)[0]


def make_array_tasks(db: Database) -> int:
    """Write the tasks of arrays accepted as one record (``store.bulk.insert_array``); how many.
    The controller calls it before each cycle's snapshot; a read that lists tasks or looks one up
    calls it first, so it never misses one the controller has not written yet. Almost always there
    are none, and this is one indexed read, with no write lock taken."""
    with db.read() as s:
        if not array_repo.any_unmade(s):
            return 0
    with db.tx() as s:
        return bulk.make_tasks(s)


def get(ctx: HeadContext, job_id: int) -> JobRecord:
    with ctx.db.read() as s:
        return job_repo.get_job(s, job_id)


SHOWN_EVENTS = 1000  # the newest a job's detail carries; older ones are paged (``events``)
MAX_EVENTS_PAGE = 10_000


def show(ctx: HeadContext, job_id: int, who: Principal) -> tuple[JobRecord, bool, list[Event], int]:
    """The job, whether ``who`` may see its insides (command, environment), its newest events and
    how many it has in all."""
    try:
        return _show(ctx, job_id, who)
    except NotFound:  # a task of an array accepted a moment ago, not written yet? (ids can be guessed)
        if not make_array_tasks(ctx.db):
            raise
        return _show(ctx, job_id, who)


def _show(ctx: HeadContext, job_id: int, who: Principal) -> tuple[JobRecord, bool, list[Event], int]:
    with ctx.db.read() as s:
        job = job_repo.get_job(s, job_id)
        events, total = job_repo.newest_events(s, job_id, SHOWN_EVENTS)
        return job, Visibility(s, who).sees(job), events, total


def width(ctx: HeadContext, job_id: int) -> list[tuple[datetime, int]]:
    """An elastic job's width over its life (issue 35): how many workers ran, at each change."""
    with ctx.db.read() as s:
        return width_over_time(worker_repo.worker_spans(s, job_id))


def events(ctx: HeadContext, job_id: int, after: int, limit: int) -> list[Event]:
    """A page of a job's events: those after event id ``after``, oldest first."""
    if not 1 <= limit <= MAX_EVENTS_PAGE:
        raise InvalidInput(f"limit must be from 1 to {MAX_EVENTS_PAGE}, got {limit}")
    with ctx.db.read() as s:
        job_repo.get_job(s, job_id)  # 404 for a job that does not exist
        return job_repo.job_events(s, job_id, after=after, limit=limit)


def listing(
    ctx: HeadContext,
    who: Principal,
    include_finished: bool,
    limit: int = 1000,
    user: str | None = None,
    tasks: bool = True,
) -> tuple[list[tuple[JobRecord, bool]], int]:
    """The newest ``limit`` jobs (``user``'s only, if given), each with whether ``who`` may see
    its insides, and how many there are in all. The queue is public; what runs inside a job is not."""
    if not 1 <= limit <= MAX_LIST:
        raise InvalidInput(f"limit must be from 1 to {MAX_LIST}, got {limit}")
    if user is not None:
        check_user_name(user)
    if tasks:
        make_array_tasks(ctx.db)
    with ctx.db.read() as s:
        total = job_repo.count_jobs(s, include_finished=include_finished, owner=user, tasks=tasks)
        visible = Visibility(s, who)
        jobs = job_repo.list_jobs(s, include_finished=include_finished, limit=limit, owner=user, tasks=tasks)
        return [(j, visible.sees(j)) for j in jobs], total


CANCEL_TRIES = 5


def cancel(ctx: HeadContext, job_id: int, who: Principal) -> JobRecord:
    """The controller may move the job between our read and our write (the write is guarded
    and then refused as ``Stale``): read again and decide again on what it is now."""
    for tries_left in range(CANCEL_TRIES - 1, -1, -1):
        try:
            with ctx.db.tx() as s:
                require_job(s, who, job_repo.get_job(s, job_id), "cancel")
                job = job_repo.request_cancel(s, job_id, ctx.clock.now(), who.user)
            break
        except Stale:
            if not tries_left:
                raise
    ctx.wake_controller()
    return job


@dataclass(frozen=True, slots=True)
class Why:
    job: JobRecord
    code: str
    message: str
    estimated_start: datetime | None = None


def why(ctx: HeadContext, job_id: int) -> Why:
    job = get(ctx, job_id)
    if job.state is JobState.PENDING:
        if job.reason_code == ReasonCode.UNSATISFIABLE:  # no replay of job ends can start it
            return Why(job, job.reason_code, job.reason or "")
        with ctx.db.read() as s:
            snapshot = load_snapshot(s, ctx.clock.now(), power_budget_w=ctx.power_budget_w)  # as the controller sees it
        return Why(
            job,
            job.reason_code or "new",
            job.reason or "waiting for the next scheduling cycle",
            estimate_start(snapshot, job_id, ctx.scheduler),
        )
    if job.state in (JobState.STARTING, JobState.RUNNING):
        where = "; ".join(
            f"worker {p.worker} on {p.node} GPUs {','.join(map(str, p.gpus)) or 'none'}" for p in job.placements
        )
        said = f"it is {job.state.value}: {where}{_image_phase(ctx, job)}{_elastic_note(ctx, job)}"
        return Why(job, job.state.value, said)
    return Why(
        job,
        job.state.value,
        f"it is {job.state.value}" + (f" (exit code {job.exit_code})" if job.exit_code is not None else ""),
    )


def _elastic_note(ctx: HeadContext, job: JobRecord) -> str:
    """Where an elastic job stands in its range (issue 35), when it would grow, and what holds it
    back now if a job of equal or higher priority waits for GPUs."""
    spec = job.spec
    if spec.max_workers is None:
        return ""
    width = len(job.placements)
    if width >= spec.max_workers:
        return f"; elastic, at its most of {spec.workers_text} workers"
    said = (
        f"; elastic, on {width} of {spec.workers_text} workers: it grows when GPUs are free and no job of"
        f" equal or higher priority waits for them, and gives back only the workers above {spec.workers}"
    )
    standing = [p.value for p in Priority if p.rank >= spec.priority.rank]
    with ctx.db.read() as s:
        waiting = job_repo.first_waiting_for_gpus(s, standing)
    return said + (f" (job {waiting} waits for GPUs now)" if waiting is not None else "")


def _image_phase(ctx: HeadContext, job: JobRecord) -> str:
    """Where a job starting in an image is with it, from the latest image event of this attempt."""
    if job.spec.image is None:
        return ""
    with ctx.db.read() as s:
        events = job_repo.job_events(s, job.id)
    attempt = max((i for i, e in enumerate(events) if e.kind == JobState.STARTING.value), default=-1)
    said = [e for e in events[attempt + 1 :] if e.kind == IMAGE_EVENT]
    if not said or "running in image" in said[-1].message:
        return ""
    return f"; getting its image: {said[-1].message}"


@dataclass(frozen=True, slots=True)
class LogChunk:
    data: bytes
    next_offset: int
    finished: bool


def logs(ctx: HeadContext, job_id: int, who: Principal, worker: int, offset: int) -> LogChunk:
    with ctx.db.read() as s:
        job = job_repo.get_job(s, job_id)
        require_job(s, who, job, "read the logs of")
        # Where its log is: the node its worker of that number ran on last (an elastic job's
        # worker that a shrink stopped is no longer among its placements, but its log stays there).
        node = worker_repo.worker_node(s, job_id, worker)
    # An elastic job's workers come and go (issue 35), each with a number its run never used before.
    numbers = MAX_WORKERS if job.spec.elastic else job.spec.workers
    if not 0 <= worker < numbers:
        raise InvalidInput(f"job {job_id} has workers 0..{numbers - 1}; there is no worker {worker}")
    if offset < 0:
        raise InvalidInput("offset must not be negative")
    data = b""
    if node is not None:
        data = ctx.executor.read_log(node, job_id, worker, offset)
    # Finished only once the job ended and the whole log was read.
    return LogChunk(data, offset + len(data), job.state.terminal and len(data) < (1 << 20))

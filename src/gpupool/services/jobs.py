"""Job use cases. A submission is committed before the caller hears back (DESIGN §6)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.errors import Conflict, InvalidInput, Stale, Unsatisfiable
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.nodes import Node
from gpupool.domain.records import Event, JobRecord
from gpupool.domain.resources import CPU_MILLI, show_cpus
from gpupool.domain.users import check_user_name
from gpupool.scheduler.capacity import holds, shape, such
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.estimate import estimate_start
from gpupool.services.access import Visibility, require_job, require_submit
from gpupool.services.context import HeadContext
from gpupool.store import bulk, idempotency
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Tx
from gpupool.store.snapshot import load_snapshot
from gpupool.store.tokens import Principal

MAX_LIST = 100_000


def submit(ctx: HeadContext, spec: JobSpec, who: Principal) -> JobRecord:
    """Only to a project that exists and that is the caller's (or open to everyone)."""
    return submit_once(ctx, spec, who, None)[0]


def submit_once(ctx: HeadContext, spec: JobSpec, who: Principal, key: str | None) -> tuple[JobRecord, bool]:
    """``submit``; with an idempotency ``key`` the caller used within 24 hours for the same request,
    the job it made then, and True (a replay). The same key for a different request is a 409."""

    def make(s: Tx, now: datetime) -> tuple[JobRecord, int]:
        require_submit(s, who, spec.project)
        check_satisfiable(spec, node_repo.load_nodes(s))
        job = job_repo.insert_job(s, spec, who.user, now, run_as=ctx.accounts.run_as(who.user, who.unix_user))
        return job, job.id

    return keyed(ctx, who, key, spec.to_dict(), make, job_repo.get_job)


MAX_BATCH = 1000


def submit_batch(ctx: HeadContext, specs: list[JobSpec], who: Principal) -> list[JobRecord]:
    """All or none, in one transaction: each spec is checked as ``submit`` checks it, and the
    first one refused refuses the batch, saying which."""
    if not 1 <= len(specs) <= MAX_BATCH:
        raise InvalidInput(f"a batch holds 1 to {MAX_BATCH} jobs, got {len(specs)}")
    with ctx.db.tx() as s:
        nodes = node_repo.load_nodes(s)
        for project in sorted({spec.project for spec in specs}):
            require_submit(s, who, project)
        for n, spec in enumerate(specs):
            try:
                check_satisfiable(spec, nodes)
            except (InvalidInput, Unsatisfiable) as exc:
                raise type(exc)(f"jobs[{n}]: {exc.message}", code=exc.code) from None
        run_as = ctx.accounts.run_as(who.user, who.unix_user)
        jobs = bulk.insert_jobs(s, [(spec, who.user, run_as) for spec in specs], ctx.clock.now())
    ctx.wake_controller()
    return jobs


T = TypeVar("T")


def keyed(
    ctx: HeadContext,
    who: Principal,
    key: str | None,
    request: Mapping[str, Any],
    make: Callable[[Tx, datetime], tuple[T, int]],
    replay: Callable[[Tx, int], T],
) -> tuple[T, bool]:
    """Run ``make`` (which returns what it made and the job id to remember) in one transaction,
    unless ``key`` was used for the same ``request`` within 24 hours: then ``replay`` what that
    made, and True. A key used for a different request is a 409."""
    fingerprint = idempotency.fingerprint(request) if key else ""
    for _ in range(2):
        try:
            with ctx.db.tx() as s:
                now = ctx.clock.now()
                if key is not None and (made := idempotency.find(s, who.user, key, now)) is not None:
                    job_id, first = made
                    if first != fingerprint:
                        raise idempotency.reused(key, job_id)
                    return replay(s, job_id), True
                result, made_id = make(s, now)
                if key is not None:
                    idempotency.remember(s, who.user, key, fingerprint, made_id, now)
            break
        except idempotency.KeyTaken:
            continue  # a concurrent request with the key committed first: the loop returns what it made
    else:
        raise Conflict(f"idempotency key {key!r} is in use by a request still being answered; retry", code="busy")
    ctx.wake_controller()
    return result, False


def get(ctx: HeadContext, job_id: int) -> JobRecord:
    with ctx.db.read() as s:
        return job_repo.get_job(s, job_id)


SHOWN_EVENTS = 1000  # the newest a job's detail carries; older ones are paged (``events``)
MAX_EVENTS_PAGE = 10_000


def show(ctx: HeadContext, job_id: int, who: Principal) -> tuple[JobRecord, bool, list[Event], int]:
    """The job, whether ``who`` may see its insides (command, environment), its newest events and
    how many it has in all."""
    with ctx.db.read() as s:
        job = job_repo.get_job(s, job_id)
        events, total = job_repo.newest_events(s, job_id, SHOWN_EVENTS)
        return job, Visibility(s, who).sees(job), events, total


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
            snapshot = load_snapshot(s, ctx.clock.now())
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
        return Why(job, job.state.value, f"it is {job.state.value}: {where}")
    return Why(
        job,
        job.state.value,
        f"it is {job.state.value}" + (f" (exit code {job.exit_code})" if job.exit_code is not None else ""),
    )


@dataclass(frozen=True, slots=True)
class LogChunk:
    data: bytes
    next_offset: int
    finished: bool


def logs(ctx: HeadContext, job_id: int, who: Principal, worker: int, offset: int) -> LogChunk:
    with ctx.db.read() as s:
        job = job_repo.get_job(s, job_id)
        require_job(s, who, job, "read the logs of")
    if not 0 <= worker < job.spec.workers:
        raise InvalidInput(f"job {job_id} has workers 0..{job.spec.workers - 1}; there is no worker {worker}")
    if offset < 0:
        raise InvalidInput("offset must not be negative")
    placement = next((p for p in job.placements if p.worker == worker), None)
    data = b""
    if placement is not None:
        data = ctx.executor.read_log(placement.node, job_id, worker, offset)
    # Finished only once the job ended and the whole log was read.
    return LogChunk(data, offset + len(data), job.state.terminal and len(data) < (1 << 20))


MIN_MEMORY_MIB = 32  # a Python interpreter alone takes ~10 MiB; below this a worker dies at start


def check_satisfiable(spec: JobSpec, nodes: list[Node]) -> None:
    """Refuse at submit what no node could ever run, rather than let it wait forever; and a memory
    limit so low that the worker would be killed as it starts (a job's memory limit is real here,
    unlike in a simulation, which keeps the traces' figures)."""
    if 0 < spec.memory_mib < MIN_MEMORY_MIB:
        raise InvalidInput(
            f"--memory {spec.memory_mib}M is below the least a worker can start with ({MIN_MEMORY_MIB}M): "
            "leave it out for no limit",
            code="memory_too_low",
        )
    if not nodes:
        return
    demand = WorkerDemand.of(spec)
    usable = [n for n in nodes if demand.models is None or any(g.model in demand.models for g in n.gpus)]
    if not usable and demand.needs_gpu:
        models = sorted({g.model for n in nodes for g in n.gpus})
        raise Unsatisfiable(
            f"no node has a GPU of model {spec.gpu_model}; models here: {', '.join(models)}",
            code=ReasonCode.GPU_MODEL.value,
        )
    biggest_gpu = max((g.memory_mib for n in nodes for g in n.gpus), default=0)
    if spec.gpu_memory_mib > biggest_gpu:
        raise Unsatisfiable(
            f"{spec.gpu_memory_mib} MiB of GPU memory is more than any GPU here has (at most {biggest_gpu} MiB)"
        )
    most = max(len(n.gpus) for n in usable or nodes)
    if demand.whole_gpus > most:
        raise Unsatisfiable(
            f"{demand.whole_gpus} GPUs per worker is more than any node has (at most {most}); "
            "use more workers with fewer GPUs each"
        )
    if demand.share and most == 0:
        raise Unsatisfiable("a GPU share needs a node with a GPU; no node has one")
    if spec.cpu_milli > max(n.cpus for n in nodes) * CPU_MILLI:
        raise Unsatisfiable(
            f"{show_cpus(spec.cpu_milli)} CPU cores per worker is more than any node has"
            f" (at most {max(n.cpus for n in nodes)})"
        )
    if spec.memory_mib > max(n.memory_mib for n in nodes):
        raise Unsatisfiable(
            f"{spec.memory_mib} MiB memory per worker is more than any node has "
            f"(at most {max(n.memory_mib for n in nodes)} MiB)"
        )
    # Each part fits some node: do they fit together, and does the gang fit the whole cluster?
    # Every node counts, whatever its state: one down or drained may come back (a Ray node
    # rejoins), and until then the job waits as ``unsatisfiable``, its reason naming it.
    room = holds(demand, nodes, spec.workers)
    if room < spec.workers:
        fewer = f"ask for at most {room} workers, or less for each" if room else "ask for less per worker"
        raise Unsatisfiable(
            f"{shape(demand, spec.workers)} can never run here: all {len(nodes)} nodes together, idle, hold "
            f"{such(room)}; {fewer}"
        )

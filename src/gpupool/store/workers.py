"""Worker rows: the processes of a job's current attempt, their handles and exits."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, func, select
from sqlalchemy.orm import Session

from gpupool.domain import exit_reasons
from gpupool.domain.arrays import ArrayTask
from gpupool.domain.errors import Stale
from gpupool.domain.jobs import JobState, Placement, StopReason
from gpupool.domain.launch import PowerSetting, WorkerHandle
from gpupool.domain.nodes import NodeState
from gpupool.domain.records import LIVE_WORKER_STATES, LiveUsage, UsageReading, WorkerRecord, WorkerStatus
from gpupool.store.arrays import task_of
from gpupool.store.convert import usage_of, worker_record
from gpupool.store.image_waits import IMAGE_REFUSED
from gpupool.store.jobs import job_for_update, job_row
from gpupool.store.orm import JobRow, NodeRow, WorkerRow
from gpupool.store.transitions import add_event, move_job, write_job
from gpupool.store.worker_rows import insert_workers, update_worker

_WORKERS = cast(Table, WorkerRow.__table__)
_LIVE = select(_WORKERS).where(_WORKERS.c.status.in_(LIVE_WORKER_STATES)).order_by(_WORKERS.c.id)
_EXIT_READS = select(*(_WORKERS.c[name] for name in ("id", "status", "released", "job_id", "node", "worker"))).where(
    _WORKERS.c.id.in_(bindparam("ids", expanding=True))
)


@dataclass(frozen=True, slots=True)
class StartTicket:
    """What the launch needs from the start transaction: the attempt and the worker rows."""

    attempt: int
    preempted: bool
    workers: tuple[tuple[int, Placement], ...]
    run_as: str | None = None  # the Unix account its workers run as (fixed at submit)
    array: ArrayTask | None = None  # a task of an array: its workers are told which
    owner: str = ""  # the user who submitted it
    rendezvous: str | None = None  # a grow's: its elastic job's attempt's (``Rendezvous.endpoint``)


def begin_start(session: Session, job_id: int, placements: tuple[Placement, ...], now: datetime) -> StartTicket:
    """Pending -> starting with the decided placements written first, so a head that dies before
    the launch finds the GPUs accounted for. Events: ``starting``, ``placed`` (where each worker
    goes) and, for a job started before, ``resumed`` (what its workers are told). Core reads and
    writes, not a loaded row and the unit of work (issue 36)."""
    columns = ("state", "stop_reason", "starts", "array_id", "run_as", "owner")
    state, stop, starts, array_id, run_as, owner = job_for_update(session, job_id, *columns)
    if state != JobState.PENDING.value or stop == StopReason.CANCEL.value:
        # Cancelled (or otherwise moved) since the snapshot the decision was made on: drop it.
        raise Stale(f"job {job_id} is {state} now, no longer pending; its start is dropped", code="invalid_state")
    preempted = stop is not None and StopReason(stop).requeues
    # A new attempt: nothing stops it yet (``stop_reason``).
    message = f"starting attempt {starts + 1}"
    move_job(session, job_id, JobState.PENDING, starts, JobState.STARTING, now, message, stop_reason=None)
    starts += 1
    nodes = {p.node for p in placements}
    add_event(
        session,
        now,
        kind="placed",
        job_id=job_id,
        node=next(iter(nodes)) if len(nodes) == 1 else None,
        message=f"attempt {starts}: {_describe(placements)}",
    )
    if starts > 1:
        flag = ", GPUPOOL_PREEMPTED=1" if preempted else ""
        message = f"resuming: attempt {starts}, GPUPOOL_RESTARTS={starts - 1}{flag}"
        add_event(session, now, kind="resumed", job_id=job_id, message=message)
    array = task_of(session, job_id) if array_id is not None else None
    return StartTicket(starts, preempted, insert_workers(session, job_id, starts, placements), run_as, array, owner)


# A worker an elastic job kept (not one a shrink stopped) that exited 0: torchrun's agents end
# together once training is done, so its job is finishing and is not grown again (issue 35).
ENDED_WELL = and_(WorkerRow.exit_code == 0, WorkerRow.released.is_(False))


def _elastic_running(session: Session, job_id: int, what: str) -> tuple[JobRow, list[WorkerRow]]:
    """A running elastic job that nothing stops, read for update, and its current attempt's live
    workers that it keeps (a shrink's leaving ones left out); else ``Stale``."""
    row = job_row(session, job_id, lock=True)
    if row.state != JobState.RUNNING.value or row.stop_reason is not None or row.max_workers is None:
        raise Stale(f"job {job_id} is no running elastic job now; its {what} is dropped", code="invalid_state")
    live = session.scalars(
        select(WorkerRow).where(
            WorkerRow.job_id == job_id,
            WorkerRow.attempt == row.starts,
            WorkerRow.status.in_(LIVE_WORKER_STATES),
            WorkerRow.released.is_(False),
        )
    )
    return row, list(live)


def begin_grow(
    session: Session, job_id: int, placements: tuple[Placement, ...], now: datetime, message: str
) -> StartTicket:
    """Worker rows for the workers a grow adds to a running elastic job's attempt (issue 35), and
    its ``grew`` event (the decision's message). A number this attempt used before (a worker a
    shrink stopped) is not used again: its node may keep that worker's run directory; the
    newcomer takes the next unused one. ``Stale`` when the job runs no more, is being stopped,
    lost worker 0, or would pass its maximum."""
    row, kept = _elastic_running(session, job_id, "grow")
    attempt = session.execute(
        select(WorkerRow.worker, ENDED_WELL).where(WorkerRow.job_id == job_id, WorkerRow.attempt == row.starts)
    ).all()
    if any(well for _, well in attempt):  # one ended well since the snapshot: finishing, not to be grown
        raise Stale(f"job {job_id} is finishing; its grow is dropped", code="invalid_state")
    if not any(w.worker == 0 for w in kept) or row.rendezvous is None:
        raise Stale(f"job {job_id} has no worker 0 to hold its rendezvous; its grow is dropped", code="invalid_state")
    if len(kept) + len(placements) > (row.max_workers or 0):
        raise Stale(f"job {job_id} would pass its {row.max_workers} workers; its grow is dropped", code="invalid_state")
    used = {number for number, _ in attempt}
    numbered = []
    for p in placements:
        number = p.worker if p.worker not in used else max(used) + 1
        used.add(number)
        numbered.append(replace(p, worker=number))
    add_event(session, now, kind="grew", job_id=job_id, message=message)
    add_event(session, now, kind="placed", job_id=job_id, message=f"attempt {row.starts}: {_describe(tuple(numbered))}")
    workers = insert_workers(session, job_id, row.starts, tuple(numbered))
    array = task_of(session, job_id) if row.array_id is not None else None
    return StartTicket(row.starts, False, workers, row.run_as, array, row.owner, row.rendezvous)


def begin_shrink(
    session: Session, job_id: int, workers: tuple[int, ...], now: datetime, message: str
) -> list[WorkerRecord]:
    """Mark the workers a shrink stops (by number) as released: leaving while they run, judged no
    more as the job's, ended with exit reason ``shrunk``; its ``shrank`` event (the decision's
    message). The live ones to stop; ``Stale`` when one is not a running extra worker or the job
    would go below its minimum."""
    row, kept = _elastic_running(session, job_id, "shrink")
    chosen = [w for w in kept if w.worker in workers and w.worker != 0]
    if len(chosen) != len(set(workers)):
        raise Stale(
            f"job {job_id} does not run workers {list(workers)} to stop; its shrink is dropped", code="invalid_state"
        )
    if len(kept) - len(chosen) < row.workers:
        raise Stale(
            f"job {job_id} would go below its {row.workers} workers; its shrink is dropped", code="invalid_state"
        )
    for w in chosen:
        w.released = True
    add_event(session, now, kind="shrank", job_id=job_id, message=message)
    return [worker_record(w) for w in chosen]


def release_worker(session: Session, worker_id: int) -> None:
    """The job runs on without this worker (a grown worker whose launch failed): its exit is not the job's."""
    session.get_one(WorkerRow, worker_id).released = True


def set_rendezvous(session: Session, job_id: int, endpoint: str) -> None:
    """Keep an elastic job's attempt's rendezvous (``Rendezvous.endpoint``): what workers a grow adds are told."""
    session.get_one(JobRow, job_id).rendezvous = endpoint


def worker_for_exit(session: Session, worker_ids: Collection[int]) -> dict[int, Any]:
    """What ``record_exit`` reads of these workers, in one Core query, by id. What the session
    holds is flushed first, as an ORM read would."""
    session.flush()
    found = session.connection().execute(_EXIT_READS, {"ids": list(worker_ids)})
    return {row.id: row for row in found}


def mark_launched(
    session: Session, worker_id: int, handle: WorkerHandle, now: datetime, port: int | None = None
) -> None:
    """``port``: the one a service replica was given (``JobSpec.port_env``). A Core ``UPDATE``,
    not a loaded row changed and flushed (issue 36); a row the session holds forgets these fields."""
    values = {"status": WorkerStatus.RUNNING.value, "handle": handle.to_json(), "started_at": now, "port": port}
    update_worker(session, worker_id, values)


def set_gpu_power(session: Session, worker_id: int, setting: PowerSetting | None) -> None:
    """The GPU power setting the worker launched with: what a power budget counts its GPUs at,
    and what the throttle restores when it lifts a cap."""
    values = {"gpu_power": None if setting is None else setting.to_json()}  # Core, as ``mark_launched``
    update_worker(session, worker_id, values)


@dataclass(frozen=True, slots=True)
class LivePower:
    """A live worker holding GPUs, as the power budget's throttle and gauges see it."""

    job_id: int
    priority: str
    started_at: datetime | None
    node: str
    gpus: tuple[int, ...]
    shared: bool
    setting: PowerSetting | None  # what it launched with; None: the GPU's default


def live_power(session: Session) -> list[LivePower]:
    rows = session.execute(
        select(
            WorkerRow.job_id,
            JobRow.priority,
            JobRow.started_at,
            WorkerRow.node,
            WorkerRow.gpus,
            WorkerRow.gpu_share,
            WorkerRow.gpu_power,
        )
        .join(JobRow, JobRow.id == WorkerRow.job_id)
        .where(WorkerRow.status.in_(LIVE_WORKER_STATES))
        .order_by(WorkerRow.id)
    )
    return [
        LivePower(j, prio, at, n, tuple(g), share > 0, PowerSetting.from_json(p))
        for j, prio, at, n, g, share, p in rows
        if g
    ]


def live_workers(session: Session) -> list[WorkerRecord]:
    """Read as plain rows, not loaded objects (issue 36: the reap reads them every tick)."""
    session.flush()
    rows: list[Any] = list(session.connection().execute(_LIVE))  # columns by name, as worker_record reads them
    return [worker_record(r) for r in rows]


def attempt_workers(session: Session, job_id: int, attempt: int) -> list[WorkerRecord]:
    rows = session.scalars(
        select(WorkerRow).where(WorkerRow.job_id == job_id, WorkerRow.attempt == attempt).order_by(WorkerRow.worker)
    )
    return [worker_record(r) for r in rows]


def record_exit(
    session: Session,
    worker_id: int,
    exit_code: int | None,
    lost: bool,
    now: datetime,
    reason: str | None = None,
    exit_reason: str | None = None,
    note: str | None = None,
    image_digest: str | None = None,
    read: Any = None,
) -> None:
    """A worker ended: a ``worker_exit`` event (``oom`` when its node says the memory limit
    killed it), or a ``lost`` one when nobody saw it end. The reason of a loss defaults to the
    state of its node: down, or its supervisor vanished. ``read``: its row from ``worker_for_exit``.
    Core statements, not a loaded row and the unit of work (issue 36: every job's exit is one);
    the job's row, when it is written, is guarded by the state it was read in, as a flush was."""
    row = read if read is not None else worker_for_exit(session, [worker_id])[worker_id]
    if row.status not in LIVE_WORKER_STATES:
        return
    if row.released and exit_reason is None:  # a shrink stopped it (issue 35): that is why it ended
        exit_reason = exit_reasons.SHRUNK
    status = (WorkerStatus.LOST if lost else WorkerStatus.EXITED).value
    values = {"status": status, "exit_code": exit_code, "exit_reason": exit_reason, "finished_at": now}
    update_worker(session, worker_id, values)
    if image_digest is not None:  # the digest the attempt ran
        state, digest = job_for_update(session, row.job_id, "state", "image_digest")
        if digest != image_digest:
            write_job(session, row.job_id, JobState(state), {"image_digest": image_digest})
    if lost:
        kind, what = "lost", f"was lost ({reason or _why_lost(session, row.node)})"
    elif exit_reason == exit_reasons.OOM:
        kind, what = "oom", f"ran out of memory and was killed (code {exit_code}): raise --memory, or use less"
    elif exit_reason == exit_reasons.GPU_OOM:
        kind, what = "gpu_oom", f"used more than its share of GPU memory and was stopped (code {exit_code})"
    elif exit_reason in (exit_reasons.IMAGE, exit_reasons.IMAGE_UNAVAILABLE):
        kind, what = "image", f"{IMAGE_REFUSED}{note or 'see its log'}"
    elif exit_reason == exit_reasons.SHRUNK:
        kind, what = "worker_exit", f"left its elastic job, stopped by a shrink (code {exit_code})"
    elif exit_reason == exit_reasons.NO_UNIX_ACCOUNT:
        kind, what = "no_account", "could not start: its owner has no Unix account on that node (see its log)"
    else:
        kind, what = "worker_exit", f"exited with code {exit_code}"
    add_event(
        session,
        now,
        kind=kind,
        job_id=row.job_id,
        node=row.node,
        message=f"worker {row.worker} on {row.node} {what}",
    )


def live_usage(session: Session) -> list[LiveUsage]:
    """The latest cgroup reading of every live worker that has one, for /metrics."""
    rows = session.execute(
        select(WorkerRow, JobRow.project, JobRow.owner)
        .join(JobRow, JobRow.id == WorkerRow.job_id)
        .where(WorkerRow.status.in_(LIVE_WORKER_STATES), WorkerRow.usage_at.is_not(None))
        .order_by(WorkerRow.job_id, WorkerRow.worker)
    )
    return [LiveUsage(row.job_id, project, owner, row.node, usage_of(row)) for row, project, owner in rows]


def kills_by_reason(session: Session) -> dict[tuple[str, str], int]:
    """Workers their node killed for a reason it knows (``oom``, ``gpu_oom``), by (reason, project),
    every one kept."""
    query = (
        select(WorkerRow.exit_reason, JobRow.project, func.count(WorkerRow.id))
        .join(JobRow, JobRow.id == WorkerRow.job_id)
        .where(WorkerRow.exit_reason.in_(exit_reasons.KILLED))
        .group_by(WorkerRow.exit_reason, JobRow.project)
    )
    return {(str(reason), project): int(n) for reason, project, n in session.execute(query)}


def _describe(placements: tuple[Placement, ...]) -> str:
    parts = []
    for p in sorted(placements, key=lambda p: p.worker):
        gpus = ",".join(map(str, p.gpus)) or "none"
        share = f" ({p.gpu_share:g} share)" if p.gpu_share else ""
        parts.append(f"worker {p.worker} on {p.node} GPUs {gpus}{share}")
    return "; ".join(parts)


def _why_lost(session: Session, node: str) -> str:
    row = session.get(NodeRow, node)
    if row is None or row.state == NodeState.DOWN.value:
        return "node down"
    return "its supervisor vanished"


def live_handles(session: Session) -> dict[str, list[tuple[int, WorkerHandle]]]:
    """Each node's live workers that were launched: (worker id, handle), for the usage readings."""
    rows = session.execute(
        select(WorkerRow.node, WorkerRow.id, WorkerRow.handle).where(
            WorkerRow.status.in_(LIVE_WORKER_STATES), WorkerRow.handle.is_not(None)
        )
    )
    out: dict[str, list[tuple[int, WorkerHandle]]] = {}
    for node, worker_id, handle in rows:
        out.setdefault(node, []).append((worker_id, WorkerHandle.from_json(handle)))
    return out


def write_usage(session: Session, readings: Mapping[int, UsageReading], now: datetime) -> None:
    """Each worker's latest cgroup reading; its CPU use is the CPU time it used since the reading
    before, over the time between them (100 % is one core busy)."""
    for row in session.scalars(select(WorkerRow).where(WorkerRow.id.in_(list(readings)))):
        memory, peak, cpu_seconds = readings[row.id]
        if row.cpu_seconds is not None and row.usage_at is not None and cpu_seconds is not None:
            elapsed = (now - row.usage_at).total_seconds()
            if elapsed > 0:
                row.cpu_pct = round(max(0.0, cpu_seconds - row.cpu_seconds) / elapsed * 100, 1)
        row.cpu_seconds = cpu_seconds
        row.memory_used_mib = None if memory is None else memory // 2**20
        row.memory_peak_mib = None if peak is None else peak // 2**20
        row.usage_at = now


def worker_spans(session: Session, job_id: int) -> list[tuple[datetime, datetime | None]]:
    """When each worker of every attempt of a job ran (from its start to its exit; None: running)."""
    rows = session.execute(
        select(WorkerRow.started_at, WorkerRow.finished_at).where(
            WorkerRow.job_id == job_id, WorkerRow.started_at.is_not(None)
        )
    )
    return [(start, end) for start, end in rows if start is not None]


def worker_node(session: Session, job_id: int, worker: int) -> str | None:
    """The node a job's worker of that number ran on last (any attempt; None: it never had one): where
    its log is, also for an elastic job's worker that a shrink stopped."""
    return session.scalar(
        select(WorkerRow.node)
        .where(WorkerRow.job_id == job_id, WorkerRow.worker == worker)
        .order_by(WorkerRow.attempt.desc(), WorkerRow.id.desc())
        .limit(1)
    )

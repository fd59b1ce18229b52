"""Build the scheduler's frozen snapshot in one short read transaction.

Job specs never change after submit, so a controller passes a ``SpecCache``: a steady cycle then
reads only ids, times and live worker rows, not every pending job's command and environment.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace
from datetime import datetime

from sqlalchemy import and_, case, func, or_, select, type_coerce
from sqlalchemy.orm import Session

from gpupool.domain import exit_reasons
from gpupool.domain.jobs import REQUEUING_STOPS, JobSpec, JobState
from gpupool.domain.launch import PowerSetting
from gpupool.domain.power_budget import PowerBudget
from gpupool.domain.records import LIVE_WORKER_STATES
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.store.attained import NONE, Attained, earlier_attained
from gpupool.store.convert import placement_of, spec_of
from gpupool.store.images import image_nodes
from gpupool.store.nodes import load_nodes, power_budgets
from gpupool.store.orm import JobRow, WorkerRow
from gpupool.store.orm_base import UtcDateTime
from gpupool.store.power_curves import curves as power_curves
from gpupool.store.projects import list_projects, recent_usage
from gpupool.store.user_usage import recent as recent_user_usage
from gpupool.store.workers import ENDED_WELL


class SpecCache:
    def __init__(self) -> None:
        self._specs: dict[int, JobSpec] = {}
        # A pending job's submit time, restarts, owner and earlier attempts' GPU time, by its id and
        # how often it started: none of them changes until it starts again.
        self._waiting: dict[int, tuple[int, datetime, int, str, Attained]] = {}
        self._running: dict[tuple[int, int], Attained] = {}  # a running job's earlier attempts', by (id, starts)

    def waiting(self, session: Session, found: list[tuple[int, int]]) -> list[tuple[int, datetime, int, str, Attained]]:
        """(id, submitted_at, restarts, owner, attained) of the pending jobs ``found`` as (id, starts):
        a queue of 10,000 costs 10,000 pairs of integers a cycle, not 10,000 rows with times."""
        stale = [job_id for job_id, starts in found if self._waiting.get(job_id, (-1,))[0] != starts]
        for start in range(0, len(stale), 500):
            rows = session.execute(
                select(JobRow.id, JobRow.starts, JobRow.submitted_at, JobRow.restarts, JobRow.owner).where(
                    JobRow.id.in_(stale[start : start + 500])
                )
            )
            read = list(rows)
            attained = earlier_attained(session, {job_id: starts + 1 for job_id, starts, *_ in read if starts})
            for job_id, starts, submitted, restarts, owner in read:
                self._waiting[job_id] = (starts, submitted, restarts, owner, attained.get(job_id, NONE))
        out = []
        for job_id, _ in found:
            _, submitted, restarts, owner, served = self._waiting[job_id]
            out.append((job_id, submitted, restarts, owner, served))
        if len(self._waiting) > 2 * len(found) + 1000:
            keep = {job_id for job_id, _ in found}
            self._waiting = {k: v for k, v in self._waiting.items() if k in keep}
        return out

    def get(self, session: Session, ids: Iterable[int]) -> dict[int, JobSpec]:
        wanted = list(ids)
        missing = [i for i in wanted if i not in self._specs]
        for start in range(0, len(missing), 500):
            for row in session.scalars(select(JobRow).where(JobRow.id.in_(missing[start : start + 500]))):
                self._specs[row.id] = spec_of(row)
        return {i: self._specs[i] for i in wanted}

    def running(self, session: Session, starts: dict[int, int]) -> dict[int, Attained]:
        """The GPU time of the earlier attempts of running jobs (``starts``: id -> attempts)."""
        wanted = {job_id: n for job_id, n in starts.items() if n > 1 and (job_id, n) not in self._running}
        for job_id, served in earlier_attained(session, wanted).items():
            self._running[(job_id, wanted[job_id])] = served
        if len(self._running) > 2 * len(starts) + 1000:
            self._running = {k: v for k, v in self._running.items() if starts.get(k[0]) == k[1]}
        return {job_id: self._running.get((job_id, n), NONE) for job_id, n in starts.items()}

    def keep_only(self, ids: set[int]) -> None:
        for stale in set(self._specs) - ids:
            del self._specs[stale]


def load_snapshot(
    session: Session,
    now: datetime,
    cache: SpecCache | None = None,
    capped: Collection[int] = (),
    power_budget_w: float = 0.0,
) -> Snapshot:
    """Resources are held by live worker rows, not by job states: a cancelled job whose process
    has not died yet still holds its GPUs, so nothing is handed out twice. Pending jobs in
    ``capped`` (array tasks over their ``%N``) are left out. ``power_budget_w``: the pool's power
    budget (``gpupool up --power-budget``; 0: none), with the nodes' own from the store."""
    cache = cache or SpecCache()
    nodes = tuple(load_nodes(session))
    by_job: dict[int, list[WorkerRow]] = {}
    for w in session.scalars(select(WorkerRow).where(WorkerRow.status.in_(LIVE_WORKER_STATES))):
        by_job.setdefault(w.job_id, []).append(w)
    started: dict[int, datetime | None] = {}
    owners: dict[int, str] = {}
    attempts: dict[int, int] = {}
    stopping: set[int] = set()
    if by_job:
        rows = session.execute(
            select(JobRow.id, JobRow.started_at, JobRow.state, JobRow.stop_reason, JobRow.owner, JobRow.starts).where(
                JobRow.id.in_(list(by_job))
            )
        )
        for job_id, at, state, stop_reason, owner, starts in rows:
            started[job_id] = at
            owners[job_id] = owner
            attempts[job_id] = starts
            if stop_reason is not None or not JobState(state).active:
                stopping.add(job_id)
    found: list[tuple[int, int]] = [
        (job_id, starts)
        for job_id, starts in session.execute(
            select(JobRow.id, JobRow.starts)
            .where(
                JobRow.state == JobState.PENDING.value,
                # a pending job asked to end (its old workers still dying) is not started again
                or_(JobRow.stop_reason.is_(None), JobRow.stop_reason.in_(REQUEUING_STOPS)),
                or_(JobRow.not_before.is_(None), JobRow.not_before <= now),
            )
            .order_by(JobRow.id)
        )
    ]
    if capped:
        found = [(job_id, starts) for job_id, starts in found if job_id not in capped]
    waiting = cache.waiting(session, found)
    specs = cache.get(session, [*by_job, *(job_id for job_id, *_ in waiting)])
    cache.keep_only(set(specs))
    served = cache.running(session, attempts)
    elastic_runs = [(j, attempts[j]) for j in by_job if specs[j].elastic and j in attempts]
    numbered, held = _numbered(session, elastic_runs, now)
    running = tuple(
        RunningJob(
            id=job_id,
            spec=specs[job_id],
            placements=tuple(placement_of(w) for w in sorted(ws, key=lambda w: w.worker)),
            started_at=started.get(job_id),
            stopping=job_id in stopping,
            owner=owners.get(job_id, ""),
            attained=served.get(job_id, NONE)[0],
            power=_launch_power(ws),
            leaving=frozenset(w.worker for w in ws if w.released),
            next_worker=numbered.get(job_id, 0),
            may_grow=job_id not in held,
        )
        for job_id, ws in sorted(by_job.items())
    )
    pending = tuple(
        PendingJob(
            id=job_id,
            spec=specs[job_id],
            submitted_at=submitted,
            restarts=restarts,
            owner=owner,
            attained=attained,
            waiting_since=since,
        )
        for job_id, submitted, restarts, owner, (attained, since) in waiting
    )
    return Snapshot(
        now=now,
        nodes=nodes,
        running=running,
        pending=pending,
        projects=tuple(list_projects(session)),
        recent_usage=recent_usage(session),
        user_usage=recent_user_usage(session),
        image_nodes=image_nodes(session, {job.spec.image for job in pending if job.spec.image}),
        power=_power(session, power_budget_w),
    )


def _power(session: Session, cluster_w: float) -> PowerBudget:
    """The budgets in force, and the calibrated curves a clock lock is counted by (read only
    when a budget is: a pool without one never asks)."""
    budget = PowerBudget(cluster_w, power_budgets(session))
    return replace(budget, curves=power_curves(session)) if budget.active else budget


# An elastic job a worker of which failed, or could not launch or get its image, this long ago or
# less is not grown (issue 35): a node that cannot take a worker is not tried every cycle.
GROW_HOLD_S = 60.0


def _numbered(session: Session, runs: list[tuple[int, int]], now: datetime) -> tuple[dict[int, int], set[int]]:
    """For running elastic jobs (job, attempt): the first worker number their attempt has not used,
    stopped workers' included (issue 35); and those not to be grown now. A job is finishing once a
    worker it kept exited 0 (torchrun's agents end together once training is done), and one whose
    worker failed, or could not launch or get its image, within ``GROW_HOLD_S`` waits that long
    before it grows again, so a node that cannot take a worker is not tried every cycle. Asked
    only where there are elastic jobs."""
    if not runs:
        return {}, set()
    wanted = set(runs)
    kept_done = func.sum(case((ENDED_WELL, 1), else_=0))
    failed_at = type_coerce(
        func.max(
            case(
                (
                    and_(
                        WorkerRow.finished_at.is_not(None),
                        or_(WorkerRow.exit_reason.is_(None), WorkerRow.exit_reason != exit_reasons.SHRUNK),
                        or_(WorkerRow.exit_code.is_(None), WorkerRow.exit_code != 0),
                    ),
                    WorkerRow.finished_at,
                ),
                else_=None,
            )
        ),
        UtcDateTime(),
    )
    rows = session.execute(
        select(WorkerRow.job_id, WorkerRow.attempt, func.max(WorkerRow.worker), kept_done, failed_at)
        .where(WorkerRow.job_id.in_([job_id for job_id, _ in runs]))
        .group_by(WorkerRow.job_id, WorkerRow.attempt)
    )
    numbered, held = {}, set()
    for job_id, attempt, top, done, failed in rows:
        if (job_id, attempt) in wanted:
            numbered[job_id] = top + 1
            if done or (failed is not None and (now - failed).total_seconds() < GROW_HOLD_S):
                held.add(job_id)
    return numbered, held


def _launch_power(workers: list[WorkerRow]) -> tuple[PowerSetting | None, ...]:
    """Each worker's launch setting, in worker order; () when all are at their default, as the
    simulator writes a job that set none (the two snapshots compare equal)."""
    settings = tuple(PowerSetting.from_json(w.gpu_power) for w in sorted(workers, key=lambda w: w.worker))
    return settings if any(s is not None for s in settings) else ()

"""Idle spells of held GPUs, and what the idle policy and the API need around them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.idle import IdleCandidate, IdleSpell
from gpupool.domain.jobs import JobState, Priority
from gpupool.domain.records import LIVE_WORKER_STATES
from gpupool.domain.telemetry import GpuKey
from gpupool.store.orm import EventRow, JobRow, ProjectRow, WorkerRow
from gpupool.store.orm_telemetry import IdleSpellRow

IDLE_WARNING = "idle_warning"
# A pending job with one of these reasons would not start if GPUs were freed: it does not count
# as waiting for the idle policy.
_NOT_WAITING_FOR_GPUS = (ReasonCode.UNSATISFIABLE.value, ReasonCode.LIMIT.value, ReasonCode.NO_NODES.value)


def load_spells(session: Session) -> dict[GpuKey, IdleSpell]:
    return {
        (r.node, r.gpu): IdleSpell(r.job_id, r.since, r.utilization_pct) for r in session.scalars(select(IdleSpellRow))
    }


def save_spells(session: Session, before: Mapping[GpuKey, IdleSpell], after: Mapping[GpuKey, IdleSpell]) -> None:
    """Write what changed from ``before`` (what ``load_spells`` read) to ``after``: a round in
    which nothing started or ended being idle costs no writes."""
    for node, gpu in sorted(before.keys() - after.keys()):
        session.execute(delete(IdleSpellRow).where(IdleSpellRow.node == node, IdleSpellRow.gpu == gpu))
    for (node, gpu), spell in sorted(after.items()):
        if before.get((node, gpu)) == spell:
            continue
        row = session.get(IdleSpellRow, (node, gpu))
        if row is None:
            row = IdleSpellRow(node=node, gpu=gpu)
            session.add(row)
        row.job_id, row.since, row.utilization_pct = spell.job_id, spell.since, spell.utilization_pct


def candidates(session: Session) -> list[IdleCandidate]:
    """Running interactive jobs of projects with an idle timeout, with the GPUs they hold."""
    rows = session.execute(
        select(JobRow.id, JobRow.project, ProjectRow.idle_timeout_s, WorkerRow.node, WorkerRow.gpus)
        .join(ProjectRow, ProjectRow.name == JobRow.project)
        .join(WorkerRow, WorkerRow.job_id == JobRow.id)
        .where(
            JobRow.state == JobState.RUNNING.value,
            JobRow.priority == Priority.INTERACTIVE.value,
            JobRow.stop_reason.is_(None),
            ProjectRow.idle_timeout_s.is_not(None),
            WorkerRow.status.in_(LIVE_WORKER_STATES),
        )
    )
    gpus: dict[int, set[GpuKey]] = {}
    meta: dict[int, tuple[str, float]] = {}
    for job_id, project, timeout, node, held in rows:
        gpus.setdefault(job_id, set()).update((node, int(g)) for g in held)
        meta[job_id] = (project, float(timeout or 0.0))
    return [IdleCandidate(j, meta[j][0], meta[j][1], frozenset(keys)) for j, keys in gpus.items() if keys]


def warned_since(session: Session, job_ids: list[int]) -> dict[int, datetime]:
    """Each job's latest idle warning."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(EventRow.job_id, func.max(EventRow.time))
        .where(EventRow.kind == IDLE_WARNING, EventRow.job_id.in_(job_ids))
        .group_by(EventRow.job_id)
    )
    return {int(job_id): when for job_id, when in rows if job_id is not None}


def waiting(session: Session) -> int:
    """Pending jobs that wait for GPUs (freeing some could start them)."""
    return int(
        session.scalar(
            select(func.count(JobRow.id)).where(
                JobRow.state == JobState.PENDING.value,
                or_(JobRow.reason_code.is_(None), JobRow.reason_code.not_in(_NOT_WAITING_FOR_GPUS)),
            )
        )
        or 0
    )


@dataclass(frozen=True, slots=True)
class IdleGpu:
    """An allocated GPU idle for at least the head's idle time, with the job holding it."""

    node: str
    gpu: int
    job_id: int
    job_name: str
    project: str
    owner: str
    priority: str
    since: datetime
    utilization_pct: float
    idle_for_s: float


def idle_gpus(session: Session, now: datetime, after_s: float) -> list[IdleGpu]:
    rows = session.execute(
        select(IdleSpellRow, JobRow.name, JobRow.project, JobRow.owner, JobRow.priority)
        .join(JobRow, JobRow.id == IdleSpellRow.job_id)
        .where(IdleSpellRow.since <= now - timedelta(seconds=after_s))
        .order_by(IdleSpellRow.node, IdleSpellRow.gpu)
    )
    return [
        IdleGpu(
            spell.node,
            spell.gpu,
            spell.job_id,
            name,
            project,
            owner,
            priority,
            spell.since,
            spell.utilization_pct,
            max(0.0, (now - spell.since).total_seconds()),
        )
        for spell, name, project, owner, priority in rows
    ]

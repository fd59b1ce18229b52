"""Core writes of worker rows (issue 36): statements on the session's connection, not ORM
objects and the unit of work, for the rows every job's start writes. ``workers`` says when."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from sqlalchemy import Table, bindparam, insert, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from gpupool.domain.jobs import Placement
from gpupool.domain.records import WorkerStatus
from gpupool.store.orm import WorkerRow

_WORKERS = cast(Table, WorkerRow.__table__)
_INSERT_WORKERS = insert(_WORKERS).returning(_WORKERS.c.id, sort_by_parameter_order=True)
# Executed on the session's connection: no autoflush; the columns set are the parameters' keys.
_UPDATE_WORKER = update(_WORKERS).where(_WORKERS.c.id == bindparam("wid"))


def insert_workers(
    session: Session, job_id: int, attempt: int, placements: tuple[Placement, ...]
) -> tuple[tuple[int, Placement], ...]:
    """Worker rows, launching, for ``placements`` in the job's ``attempt``: one Core insert of
    them all, their ids returned in order (not ORM objects flushed by the unit of work, issue 36)."""
    values = [
        {
            "job_id": job_id,
            "attempt": attempt,
            "worker": p.worker,
            "node": p.node,
            "gpus": list(p.gpus),
            "gpu_share": p.gpu_share,
            "gpu_memory_mib": p.gpu_memory_mib,
            "cpus": list(p.cpus),
            "memory_mib": p.memory_mib,
            "cpu_milli": p.cpu_milli,
            "status": WorkerStatus.LAUNCHING.value,
            "handle": None,
            "started_at": None,
        }
        for p in placements
    ]
    ids = list(session.connection().execute(_INSERT_WORKERS, values).scalars())
    return tuple(zip(ids, placements, strict=True))


def update_worker(session: Session, worker_id: int, values: Mapping[str, object]) -> None:
    """Set these columns of one worker's row."""
    session.connection().execute(_UPDATE_WORKER, {"wid": worker_id, **values})
    _forget(session, worker_id, values)


def _forget(session: Session, worker_id: int, values: Mapping[str, object]) -> None:
    """Expire what a Core write changed on the session's copy of the row, if it holds one, so the
    next read sees the row as it is (the unit of work would have kept its copy up to date)."""
    held = session.identity_map.get(identity_key(WorkerRow, worker_id))
    if held is not None:
        session.expire(held, list(values))

"""Attained GPU time (what the scheduling literature calls "attained GPU time"; here "service" means
an inference service only): the GPU-seconds a job's earlier attempts received, read from their
worker rows (a job requeued after a preemption keeps its earlier attempts' rows, as history). The
least-attained order (``scheduler.plugins.las``) reads it from the snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.store.orm import WorkerRow

Attained = tuple[float, datetime | None]  # GPU-seconds, and when the last of those attempts ended
NONE: Attained = (0.0, None)


def earlier_attained(session: Session, before: Mapping[int, int]) -> dict[int, Attained]:
    """Per job id, the GPU time of its attempts numbered below ``before[id]``: every attempt of a
    waiting job (``starts + 1``), the finished ones of a running job (``starts``)."""
    out: dict[int, Attained] = {job_id: NONE for job_id in before}
    ids = list(before)
    for start in range(0, len(ids), 500):
        query = select(
            WorkerRow.job_id,
            WorkerRow.attempt,
            WorkerRow.gpus,
            WorkerRow.gpu_share,
            WorkerRow.started_at,
            WorkerRow.finished_at,
        ).where(WorkerRow.job_id.in_(ids[start : start + 500]), WorkerRow.started_at.is_not(None))
        for job_id, attempt, gpus, share, started, finished in session.execute(query):
            if attempt >= before[job_id] or started is None or finished is None:
                continue
            held = len(gpus or ()) * (share if share > 0 else 1.0)
            attained, last = out[job_id]
            seconds = max(0.0, (finished - started).total_seconds())
            out[job_id] = (attained + held * seconds, finished if last is None else max(last, finished))
    return out

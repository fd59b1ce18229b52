"""What the store keeps of jobs' images while they start (issue 32): which live workers run in an
image, and what their nodes said of it (events, the digest)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.launch import ImagePhase, WorkerHandle
from gpupool.domain.records import LIVE_WORKER_STATES
from gpupool.store.orm import JobRow, WorkerRow
from gpupool.store.transitions import add_event

IMAGE_EVENT = "image"  # an event saying where a worker is with its image (and the kind of an image failure)


class ImageWorker(NamedTuple):
    worker_id: int
    job_id: int
    worker: int
    node: str
    handle: WorkerHandle


def live_image_workers(session: Session, skip: Collection[int]) -> list[ImageWorker]:
    """Live, launched workers of jobs in an image, but those in ``skip`` (already running in it)."""
    rows = session.execute(
        select(WorkerRow.id, WorkerRow.job_id, WorkerRow.worker, WorkerRow.node, WorkerRow.handle)
        .join(JobRow, JobRow.id == WorkerRow.job_id)
        .where(JobRow.image.is_not(None), WorkerRow.status.in_(LIVE_WORKER_STATES), WorkerRow.handle.is_not(None))
        .order_by(WorkerRow.id)
    )
    return [
        ImageWorker(wid, job_id, worker, node, WorkerHandle.from_json(handle))
        for wid, job_id, worker, node, handle in rows
        if wid not in skip
    ]


def record_phase(session: Session, now: datetime, worker: ImageWorker, phase: ImagePhase) -> None:
    """An event of the worker's job saying the phase; with a digest, the job's ``image_digest``."""
    add_event(
        session,
        now,
        kind=IMAGE_EVENT,
        job_id=worker.job_id,
        node=worker.node,
        message=f"worker {worker.worker} on {worker.node}: {phase.line}",
    )
    if phase.digest is not None:
        job = session.get_one(JobRow, worker.job_id)
        if job.image_digest != phase.digest:
            job.image_digest = phase.digest

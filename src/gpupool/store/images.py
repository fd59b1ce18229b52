"""What the store keeps of jobs' images while they start (issue 32): which live workers run in an
image, and what their nodes said of it (events, the digest)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobState
from gpupool.domain.launch import ImagePhase, WorkerHandle
from gpupool.domain.records import LIVE_WORKER_STATES
from gpupool.store.orm import JobRow, WorkerRow
from gpupool.store.transitions import add_event, transition_job

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


def image_nodes(session: Session, images: Collection[str]) -> dict[str, frozenset[str]]:
    """For each of ``images`` (as jobs name them), the nodes a job ran in it on: the scheduler's
    tie-breaker between nodes its placement scores alike (their caches likely hold it)."""
    if not images:
        return {}
    rows = session.execute(
        select(JobRow.image, WorkerRow.node)
        .distinct()
        .join(WorkerRow, WorkerRow.job_id == JobRow.id)
        .where(JobRow.image.in_(sorted(images)), JobRow.image_digest.is_not(None), WorkerRow.started_at.is_not(None))
    )
    found: dict[str, set[str]] = {}
    for image, node in rows:
        if image is not None:
            found.setdefault(image, set()).add(node)
    return {image: frozenset(nodes) for image, nodes in found.items()}


def running_in_images(session: Session, now: datetime, job_ids: Collection[int], ready: Collection[int]) -> list[int]:
    """Move each starting job whose current attempt's live workers are all ``ready`` (they run in
    their image) to running; the jobs moved. Its clock starts now, after its image was got."""
    moved = []
    for job_id in sorted(job_ids):
        row = session.get(JobRow, job_id)
        if row is None or row.state != JobState.STARTING.value:
            continue
        workers = session.scalars(
            select(WorkerRow.id).where(
                WorkerRow.job_id == job_id,
                WorkerRow.attempt == row.starts,
                WorkerRow.status.in_(LIVE_WORKER_STATES),
            )
        ).all()
        if workers and all(w in ready for w in workers):
            transition_job(session, row, JobState.RUNNING, now, f"running in its image (attempt {row.starts})")
            moved.append(job_id)
    return moved


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

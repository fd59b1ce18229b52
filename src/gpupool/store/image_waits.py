"""How long a job has waited for an image no node could get now, read from its own history.

The wait began at the first exit for want of the image (``image_unavailable``) among the job's
latest attempts in a row that each had one: the workers of earlier attempts stay as rows, so
nothing new is stored, and an attempt that got its image, or ended for any other reason, starts
the count over without bookkeeping (a head restart changes nothing either). The node's latest
sentence on why is the tail of the newest event ``store.workers`` wrote for it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.domain import exit_reasons
from gpupool.domain.outcome import ImageWait
from gpupool.store.orm import EventRow, WorkerRow

IMAGE_REFUSED = "could not start in its image: "  # in store.workers' event of kind image; the node's note follows


def image_wait(
    session: Session, job_id: int, starts: int, image: str | None, now: datetime, limit_s: float | None
) -> ImageWait:
    """The wait of job ``job_id`` (of ``image``), whose latest attempt (``starts``) ended for want of its image."""
    of_job = (WorkerRow.job_id == job_id, WorkerRow.attempt <= starts)
    unavailable = WorkerRow.exit_reason == exit_reasons.IMAGE_UNAVAILABLE
    waiting = select(WorkerRow.attempt).where(*of_job, unavailable)
    other = session.scalar(select(func.max(WorkerRow.attempt)).where(*of_job, WorkerRow.attempt.not_in(waiting)))
    since = session.scalar(
        select(func.min(WorkerRow.finished_at)).where(*of_job, WorkerRow.attempt > (other or 0), unavailable)
    )
    newest = session.execute(
        select(EventRow.node, EventRow.message)
        .where(EventRow.job_id == job_id, EventRow.kind == "image", EventRow.message.contains(IMAGE_REFUSED))
        .order_by(EventRow.id.desc())
        .limit(1)
    ).first()
    last = "its events say why"
    if newest is not None:
        node, message = newest
        last = message.partition(IMAGE_REFUSED)[2] + (f", on {node}" if node else "")
    waited = 0.0 if since is None else max(0.0, (now - since).total_seconds())
    return ImageWait(image or "?", waited, last, limit_s)

"""Job order: priority class (highest first), then submit time, then id."""

from __future__ import annotations

from gpupool.domain.snapshot import PendingJob


def priority_fifo(job: PendingJob) -> tuple[int, float, int]:
    return (-job.spec.priority.rank, job.submitted_at.timestamp(), job.id)


def fifo(job: PendingJob) -> tuple[int, float, int]:
    """Submit order alone, whatever the priority class."""
    return (0, job.submitted_at.timestamp(), job.id)

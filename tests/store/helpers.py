"""Helpers shared by the store tests."""

from __future__ import annotations

from datetime import datetime

from gpupool.domain.jobs import JobState
from gpupool.store import jobs
from gpupool.store.db import Database
from gpupool.store.transitions import transition_job


def move(db: Database, job_id: int, now: datetime, *states: JobState) -> None:
    """Walk a job through ``states`` with the one transition function, as the controller would."""
    with db.tx() as session:
        row = jobs.job_row(session, job_id)
        for state in states:
            transition_job(session, row, state, now, f"test: to {state.value}")

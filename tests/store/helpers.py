"""Helpers shared by the store tests."""

from __future__ import annotations

from datetime import datetime

from alembic import command
from sqlalchemy import Connection

from gpupool.domain.jobs import JobState
from gpupool.store import jobs
from gpupool.store.db import Database, alembic_config
from gpupool.store.transitions import transition_job


def move(db: Database, job_id: int, now: datetime, *states: JobState) -> None:
    """Walk a job through ``states`` with the one transition function, as the controller would."""
    with db.tx() as session:
        row = jobs.job_row(session, job_id)
        for state in states:
            transition_job(session, row, state, now, f"test: to {state.value}")


def upgrade_to(database: Database, connection: Connection, revision: str) -> None:
    """Bring an empty database to an old ``revision`` on ``connection``, for a migration test to
    fill it with rows as that revision had them before it migrates to the newest."""
    cfg = alembic_config(database.engine)
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)

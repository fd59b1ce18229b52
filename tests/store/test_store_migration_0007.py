"""Migration 0007 folds the four stop flags of every existing job into its one stop reason, on
SQLite and PostgreSQL, from a database at 0006 with jobs in every state."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text

from gpupool.domain.jobs import JobState, StopReason
from gpupool.store import jobs
from gpupool.store.db import Database
from gpupool.store.orm import Base
from tests.support.store import schema_diff, upgrade_to

# (state, cancel_requested, preempt_requested, timed_out, preempted, held back) -> the reason
CASES: list[tuple[str, bool, bool, bool, bool, bool, StopReason | None]] = [
    ("pending", False, False, False, False, False, None),
    ("pending", False, False, False, True, False, StopReason.PREEMPT),  # requeued after a preemption
    ("pending", False, False, False, True, True, StopReason.IDLE),  # ... for sitting idle: held back
    ("starting", False, False, False, False, False, None),
    ("starting", True, False, False, False, False, StopReason.CANCEL),
    ("running", False, False, False, False, False, None),
    ("running", True, False, False, False, False, StopReason.CANCEL),
    ("running", False, True, False, False, False, StopReason.PREEMPT),
    ("running", False, True, False, False, True, StopReason.IDLE),
    ("running", True, True, False, False, False, StopReason.CANCEL),  # a cancel outranks a preemption
    ("running", True, False, True, False, False, StopReason.TIMEOUT),
    ("running", True, True, True, False, False, StopReason.TIMEOUT),
    ("preempted", False, False, False, False, False, None),
    ("lost", False, False, False, False, False, None),
    ("succeeded", False, False, False, False, False, None),
    ("failed", False, False, False, False, False, None),
    ("failed", False, False, True, False, False, StopReason.TIMEOUT),  # stopped after its max runtime
    ("cancelled", False, False, False, False, False, StopReason.CANCEL),
    ("cancelled", False, False, False, True, True, StopReason.CANCEL),  # cancelled while held back
]


def test_0007_turns_every_jobs_flags_into_its_stop_reason(db_url: str, now: datetime) -> None:
    database = Database(db_url)
    try:
        with database.engine.begin() as connection:
            upgrade_to(database, connection, "0006")
            for job_id, (state, cancel, preempt, timed_out, preempted, held, _) in enumerate(CASES, 1):
                connection.execute(
                    text(
                        "INSERT INTO jobs (id, name, project, owner, state, command, gpus, workers, cpus, "
                        "memory_mib, priority, max_restarts, env, starts, restarts, preempted, cancel_requested, "
                        "timed_out, preempt_requested, not_before, submitted_at) VALUES (:id, 'j', 'p', 'alice', "
                        ":state, '[\"true\"]', 1.0, 1, 0, 0, 'train', 0, '{}', 1, 0, :preempted, :cancel, "
                        ":timed_out, :preempt, :held, :now)"
                    ),
                    {
                        "id": job_id,
                        "state": state,
                        "preempted": preempted,
                        "cancel": cancel,
                        "timed_out": timed_out,
                        "preempt": preempt,
                        "held": now if held else None,
                        "now": now,
                    },
                )
        database.migrate()
        assert schema_diff(database, Base.metadata) == []
        with database.tx() as session:
            got = {j.id: j for j in jobs.list_jobs(session, include_finished=True)}
        for job_id, (state, *_, reason) in enumerate(CASES, 1):
            assert (got[job_id].state, got[job_id].stop_reason) == (JobState(state), reason), CASES[job_id - 1]
        # What the flags used to say, the reason says now.
        for job_id, (state, cancel, _, _, preempted, _, _) in enumerate(CASES, 1):
            if state in ("starting", "running"):
                assert got[job_id].cancel_requested == cancel, CASES[job_id - 1]
            if state == "pending":
                assert got[job_id].preempted == preempted, CASES[job_id - 1]
    finally:
        database.close()

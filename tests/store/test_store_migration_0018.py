"""Migration 0018 on SQLite and PostgreSQL, from a database at 0017: ``exit_reason`` widens to 32
characters, so a worker that ended for want of its image (``image_unavailable``, 17) can be
recorded at all on PostgreSQL, and the reasons already there are kept."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text

from gpupool.domain import exit_reasons
from gpupool.store import jobs
from gpupool.store.db import Database
from gpupool.store.orm import Base, WorkerRow
from tests.support.store import schema_diff, upgrade_to


def test_0018_widens_exit_reason_and_keeps_the_reasons_there(db_url: str, now: datetime) -> None:
    database = Database(db_url)
    try:
        with database.engine.begin() as connection:
            upgrade_to(database, connection, "0017")
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, project, owner, state, command, gpus, workers, memory_mib, priority,"
                    " max_restarts, env, starts, restarts, submitted_at, exit_code, exit_reason) VALUES"
                    " (1, 'j', 'default', 'alice', 'failed', '[\"true\"]', 1.0, 1, 0, 'train', 0, '{}', 1, 0, :now,"
                    " 137, 'oom')"
                ),
                {"now": now},
            )
            connection.execute(
                text(
                    "INSERT INTO workers (id, job_id, attempt, worker, node, gpus, gpu_share, cpus, memory_mib,"
                    " status, exit_code, exit_reason) VALUES (1, 1, 1, 0, 'n', '[0]', 0, '[]', 0, 'exited', 137, 'oom')"
                ),
            )
        database.migrate()
        assert schema_diff(database, Base.metadata) == []
        with database.tx() as s:
            job = jobs.get_job(s, 1)
            assert (job.exit_code, job.exit_reason) == (137, exit_reasons.OOM)
            worker = s.get_one(WorkerRow, 1)
            assert worker.exit_reason == exit_reasons.OOM
            worker.exit_reason = exit_reasons.IMAGE_UNAVAILABLE  # 17 characters: PostgreSQL refused it at 0017
        with database.read() as s:
            assert s.get_one(WorkerRow, 1).exit_reason == exit_reasons.IMAGE_UNAVAILABLE
    finally:
        database.close()

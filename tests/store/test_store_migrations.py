"""The migrations build exactly the schema the ORM declares, on every engine."""

from __future__ import annotations

from datetime import datetime

import pytest
from alembic import command
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Connection, Integer, MetaData, inspect, select, text

from gpupool.domain.jobs import JobSpec
from gpupool.store import jobs
from gpupool.store.db import Database, alembic_config
from gpupool.store.orm import Base, JobRow
from tests.support.store import schema_diff


def test_migrations_produce_exactly_the_orm_schema(db: Database) -> None:
    assert schema_diff(db, Base.metadata) == []
    tables = set(inspect(db.engine).get_table_names())
    assert tables == set(Base.metadata.tables) | {"alembic_version"}


def test_schema_comparison_would_notice_a_difference(db: Database) -> None:
    """Guards the test above: the comparison is live, not vacuously empty."""
    changed = MetaData()
    for table in Base.metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["jobs"].append_column(Column("extra", Integer, nullable=True))
    diff = schema_diff(db, changed)
    assert [d[0] for d in diff if isinstance(d, tuple)] == ["add_column"]


def test_database_is_at_the_newest_revision_and_migrate_is_repeatable(db: Database) -> None:
    head = ScriptDirectory.from_config(alembic_config(db.engine)).get_current_head()
    db.migrate()  # a second start must be a no-op
    with db.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == head
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one() == 1
    assert schema_diff(db, Base.metadata) == []


def test_tx_commits_on_success_and_rolls_back_on_error(db: Database, now: datetime) -> None:
    with db.tx() as session:
        kept = jobs.insert_job(session, JobSpec.create(command=["true"]), "alice", now)
    with pytest.raises(RuntimeError, match="boom"), db.tx() as session:
        jobs.insert_job(session, JobSpec.create(command=["false"]), "alice", now)
        raise RuntimeError("boom")
    with db.tx() as session:
        assert list(session.scalars(select(JobRow.id))) == [kept.id]


# Every table of revision 0001 with its key, and one or more rows in each: an upgrade must keep them all.
TABLES_0001 = {"jobs": "id", "workers": "id", "events": "id", "nodes": "name", "gpus": "node", "tokens": "id"}


def _fill_0001(connection: Connection, now: datetime) -> None:
    at = {"now": now.strftime("%Y-%m-%d %H:%M:%S.%f")}
    for job_id, state in ((1, "running"), (2, "succeeded")):
        connection.execute(
            text(
                "INSERT INTO jobs (id, name, project, owner, state, command, gpus, workers, cpus, memory_mib, "
                "priority, max_restarts, env, workdir, starts, restarts, preempted, cancel_requested, timed_out, "
                "submitted_at) VALUES (:id, 'train', 'vision', 'alice', :state, '[\"python\", \"t.py\"]', 1.0, 2, "
                "3, 0, 'train', 1, '{\"A\": \"1\"}', '/home/alice', 2, 1, false, false, false, :now)"
            ),
            {"id": job_id, "state": state, **at},
        )
    for attempt in (1, 2):  # a job's earlier attempt stays, as history
        for worker in (0, 1):
            connection.execute(
                text(
                    "INSERT INTO workers (job_id, attempt, worker, node, gpus, gpu_share, cpus, memory_mib, status, "
                    "handle, started_at) VALUES (1, :attempt, :worker, 'node-1', '[0]', 0.0, '[]', 0, :status, "
                    "'{\"pid\": 42}', :now)"
                ),
                {"attempt": attempt, "worker": worker, "status": "exited" if attempt == 1 else "running", **at},
            )
    for job_id, kind in ((1, "submitted"), (1, "running"), (2, "succeeded"), (None, "node_up")):
        connection.execute(
            text("INSERT INTO events (time, job_id, node, kind, message) VALUES (:now, :job, 'node-1', :kind, 'm')"),
            {"job": job_id, "kind": kind, **at},
        )
    connection.execute(
        text(
            "INSERT INTO nodes (name, state, address, cpus, memory_mib, labels, updated_at) "
            "VALUES ('node-1', 'up', 'x', 8, 1024, '{}', :now)"
        ),
        at,
    )
    connection.execute(
        text(
            'INSERT INTO gpus (node, "index", uuid, model, memory_mib, simulated, healthy) '
            "VALUES ('node-1', 0, 'GPU-0', 'A100', 40960, true, true)"
        )
    )
    connection.execute(
        text("INSERT INTO tokens (\"user\", role, token_hash, created_at) VALUES ('root', 'admin', 'h', :now)"), at
    )


def _rows(connection: Connection, table: str, columns: list[str]) -> list[tuple[object, ...]]:
    names = ", ".join(f'"{c}"' for c in columns)
    return [tuple(r) for r in connection.execute(text(f'SELECT {names} FROM "{table}" ORDER BY 1, 2'))]


def test_upgrading_a_0001_database_with_rows_keeps_every_row(db_url: str, now: datetime) -> None:
    """0002 and later add columns to ``jobs``: on SQLite, rebuilding that table with foreign keys
    on would delete every worker and event through ON DELETE CASCADE."""
    database = Database(db_url)
    try:
        with database.engine.begin() as connection:
            cfg = alembic_config(database.engine)
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "0001")
            _fill_0001(connection, now)
        with database.engine.connect() as connection:
            columns = {t: [c["name"] for c in inspect(connection).get_columns(t)] for t in TABLES_0001}
            before = {t: _rows(connection, t, columns[t]) for t in TABLES_0001}
        assert [len(before[t]) for t in TABLES_0001] == [2, 4, 4, 1, 1, 1]

        database.migrate()

        with database.engine.connect() as connection:
            after = {t: [c["name"] for c in inspect(connection).get_columns(t)] for t in TABLES_0001}
            for table in TABLES_0001:
                kept = [c for c in columns[table] if c in after[table]]
                projected = [tuple(row[columns[table].index(c)] for c in kept) for row in before[table]]
                assert _rows(connection, table, kept) == projected, table
        # 0007 folded the jobs' stop flags into stop_reason (test_store_migration_0007.py) and 0016 the
        # whole cores into millicores; nothing else went
        assert {t: set(columns[t]) - set(after[t]) for t in TABLES_0001 if set(columns[t]) - set(after[t])} == {
            "jobs": {"preempted", "cancel_requested", "timed_out", "cpus"}
        }
        assert schema_diff(database, Base.metadata) == []
        with database.tx() as session:
            job = jobs.get_job(session, 1)
            assert [e.kind for e in jobs.job_events(session, 1)] == ["submitted", "running"]
        assert (job.spec.gpu_memory_mib, job.spec.checkpoint_dir, job.spec.env) == (0, None, {"A": "1"})
        assert job.spec.cpu_milli == 3000 and {p.cpu_milli for p in job.placements} == {0}  # 3 cores, pinned
        assert len(job.placements) == 2 and job.starts == 2

        with database.engine.begin() as connection:  # and back: the downgrades drop columns in place too
            cfg.attributes["connection"] = connection
            command.downgrade(cfg, "0001")
            for table in TABLES_0001:
                assert _rows(connection, table, columns[table]) == before[table], table
    finally:
        database.close()

"""The migrations build exactly the schema the ORM declares, on every engine."""

from __future__ import annotations

from datetime import datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Integer, MetaData, inspect, select, text

from gpupool.domain.jobs import JobSpec
from gpupool.store import jobs
from gpupool.store.db import Database, alembic_config
from gpupool.store.orm import Base, JobRow


def schema_diff(db: Database, metadata: MetaData) -> list[object]:
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        return list(compare_metadata(context, metadata))


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

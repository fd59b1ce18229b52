"""Migration 0009 on SQLite and PostgreSQL, from a database at 0008: nobody loses what they could
do. Every user who owns a job in a project becomes a member of it, ``default`` stays open to
everyone, other projects become members-only, and existing jobs keep their owners (``admin``'s
stay ``admin``'s)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text

from gpupool.domain.permissions import ProjectRole
from gpupool.store import jobs, members
from gpupool.store.db import Database
from gpupool.store.orm import Base
from gpupool.usecases.projects import views
from tests.support.store import schema_diff, upgrade_to

# (id, project, owner) of the jobs a head at 0008 holds; "ghost" has no user row (a token made by
# hand before users existed would have one; a name typed into a script would not).
JOBS = [(1, "lab", "alice"), (2, "lab", "alice"), (3, "lab", "admin"), (4, "default", "bob"), (5, "nlp", "ghost")]
USERS = [("admin", "admin"), ("alice", "member"), ("bob", "member")]


def test_0009_makes_job_owners_members_and_keeps_default_open(db_url: str, now: datetime) -> None:
    database = Database(db_url)
    try:
        with database.engine.begin() as connection:
            upgrade_to(database, connection, "0008")
            for name, role in USERS:
                connection.execute(
                    text("INSERT INTO users (name, role, disabled, created_at) VALUES (:n, :r, false, :at)"),
                    {"n": name, "r": role, "at": now},
                )
            for name in ("lab", "nlp", "default"):
                connection.execute(
                    text(
                        'INSERT INTO projects (name, quota, "limit", weight, created_at) VALUES (:n, 0, NULL, 1, :at)'
                    ),
                    {"n": name, "at": now},
                )
            for job_id, project, owner in JOBS:
                connection.execute(
                    text(
                        "INSERT INTO jobs (id, name, project, owner, state, command, gpus, workers, cpus, "
                        "memory_mib, priority, max_restarts, env, starts, restarts, submitted_at) VALUES "
                        "(:id, 'j', :project, :owner, 'pending', '[\"true\"]', 1.0, 1, 0, 0, 'train', 0, '{}', 0, 0, :now)"
                    ),
                    {"id": job_id, "project": project, "owner": owner, "now": now},
                )
        database.migrate()
        assert schema_diff(database, Base.metadata) == []
        with database.tx() as s:
            assert members.projects_by_user(s) == {"alice": ["lab"]}
            assert members.role_in(s, "lab", "alice") is ProjectRole.MEMBER
            assert {v.project.name: v.everyone for v in views(s)} == {"default": True, "lab": False, "nlp": False}
            listed = jobs.list_jobs(s, include_finished=True, limit=10)
            assert sorted((j.id, j.spec.project, j.owner) for j in listed) == JOBS
    finally:
        database.close()

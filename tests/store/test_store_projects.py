"""Project rows and per-project usage, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpupool.domain.errors import Conflict, NotFound
from gpupool.domain.jobs import JobSpec, JobState, Placement
from gpupool.domain.projects import Project
from gpupool.store import jobs, projects, workers
from gpupool.store.db import Database
from gpupool.store.snapshot import load_snapshot
from tests.support.store import move


def test_set_list_and_update_projects(db: Database, now: datetime) -> None:
    with db.tx() as s:
        projects.set_project(s, Project.create("vision", quota=4, limit=6), now)
        projects.set_project(s, Project.create("nlp", quota=2, weight=2), now)
    with db.tx() as s:
        projects.set_project(s, Project.create("vision", quota=3, limit=None, weight=0.5), now)
    with db.tx() as s:
        listed = projects.list_projects(s)
        snap = load_snapshot(s, now)
    assert listed == [Project("nlp", 2.0, None, 2.0), Project("vision", 3.0, None, 0.5)]
    assert snap.projects == tuple(listed)


def test_delete_is_refused_while_the_project_has_active_jobs(db: Database, now: datetime) -> None:
    with db.tx() as s:
        projects.set_project(s, Project.create("vision", quota=1), now)
        job = jobs.insert_job(s, JobSpec.create(command=["x"], project="vision"), "alice", now).id
    with pytest.raises(Conflict) as info, db.tx() as s:
        projects.delete_project(s, "vision", now)
    assert info.value.code == "project_in_use"
    move(db, job, now, JobState.CANCELLED)
    with db.tx() as s:
        projects.delete_project(s, "vision", now)
    with pytest.raises(NotFound), db.tx() as s:
        projects.delete_project(s, "vision", now)


def test_usage_counts_live_workers_by_share_and_pending_requests(db: Database, now: datetime) -> None:
    with db.tx() as s:
        gang = jobs.insert_job(s, JobSpec.create(command=["x"], project="a", gpus=2, workers=2), "u", now).id
        share = jobs.insert_job(s, JobSpec.create(command=["x"], project="a", gpus=0.5), "u", now).id
        jobs.insert_job(s, JobSpec.create(command=["x"], project="b", gpus=4, workers=2), "u", now)
        workers.begin_start(s, gang, (Placement(0, "n", (0, 1)), Placement(1, "n", (2, 3))), now)
        workers.begin_start(s, share, (Placement(0, "n", (4,), gpu_share=0.5),), now)
    with db.tx() as s:
        allocated, pending, pending_jobs = projects.usage(s)
    assert allocated == {"a": 4.5}
    assert pending == {"b": 8.0} and pending_jobs == {"b": 1}


def test_recent_usage_decays_with_the_half_life(db: Database, now: datetime) -> None:
    from datetime import timedelta

    with db.tx() as s:
        projects.accrue_usage(s, {"a": 8.0}, now, half_life_s=3600)
    with db.tx() as s:
        projects.accrue_usage(s, {}, now + timedelta(hours=1), half_life_s=3600)
    with db.tx() as s:
        assert projects.recent_usage(s) == pytest.approx({"a": 4.0})
        projects.accrue_usage(s, {"b": 2.0}, now + timedelta(hours=2), half_life_s=3600)
    with db.tx() as s:
        assert projects.recent_usage(s) == pytest.approx({"a": 2.0, "b": 2.0})
        assert load_snapshot(s, now).recent_usage == pytest.approx({"a": 2.0, "b": 2.0})

"""A job's events are paged (issue 15, part 5), on both engines: its detail carries the newest
1,000 with the total, and /events walks them all in order, a page at a time."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpupool.clock import FakeClock
from gpupool.domain.errors import InvalidInput, NotFound
from gpupool.domain.jobs import JobSpec
from gpupool.sim.cluster import uniform
from gpupool.store.db import Database
from gpupool.store.transitions import add_event
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import USER, FakeExecutor


def test_the_detail_has_the_newest_events_and_pages_walk_them_all(db: Database, now: datetime) -> None:
    ctx = HeadContext(db, FakeClock(now), FakeExecutor(uniform(1, 1)), lambda: None)
    job = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=0), USER)  # its "submitted" event
    with db.tx() as s:
        for i in range(1, 1200):
            add_event(s, now, kind="note", job_id=job.id, message=f"note {i}")
    _, _, shown, total = job_service.show(ctx, job.id, USER)
    assert total == 1200 and len(shown) == job_service.SHOWN_EVENTS
    assert shown[0].message == "note 200" and shown[-1].message == "note 1199"
    walked, after = [], 0
    while page := job_service.events(ctx, job.id, after, 500):
        walked += page
        after = page[-1].id or 0
    assert len(walked) == 1200 and walked[0].kind == "submitted" and walked[-1].message == "note 1199"
    assert [e.id for e in walked] == sorted(e.id for e in walked)
    with pytest.raises(InvalidInput):
        job_service.events(ctx, job.id, 0, 0)
    with pytest.raises(NotFound):
        job_service.events(ctx, job.id + 1000, 0, 10)

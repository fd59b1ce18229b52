"""Idempotency keys on both engines: one job per (user, key) within 24 hours, also when two
requests with the key race (the loser's transaction rolls back whole and returns the winner's
job); after 24 hours the key may make a new job."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpupool.clock import FakeClock
from gpupool.domain.errors import Conflict
from gpupool.domain.jobs import JobSpec
from gpupool.store import idempotency
from gpupool.store import jobs as job_repo
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit

ADMIN = Principal("admin", "admin")
SPEC = JobSpec.create(command=["train"], gpus=0)


def _jobs(ctx: HeadContext) -> int:
    with ctx.db.tx() as s:
        return job_repo.count_jobs(s, include_finished=True, owner=None)


def test_one_job_per_key_then_a_new_one_after_a_day(ctx: HeadContext) -> None:
    first, replayed = GroupCommit(ctx).submit(SPEC, ADMIN, "k")
    again, replayed_again = GroupCommit(ctx).submit(SPEC, ADMIN, "k")
    assert (replayed, replayed_again) == (False, True) and again.id == first.id and _jobs(ctx) == 1
    with pytest.raises(Conflict) as reused:
        GroupCommit(ctx).submit(JobSpec.create(command=["eval"], gpus=0), ADMIN, "k")
    assert reused.value.code == "idempotency_key_reused" and _jobs(ctx) == 1
    assert isinstance(ctx.clock, FakeClock)
    ctx.clock.advance(24 * 3600 + 1)
    later, replayed_later = GroupCommit(ctx).submit(SPEC, ADMIN, "k")
    assert not replayed_later and later.id != first.id and _jobs(ctx) == 2


def test_a_request_that_loses_the_race_for_a_key_rolls_back_its_job(ctx: HeadContext, now: datetime) -> None:
    """The winner committed the key between the loser's look-up and its insert."""
    winner = job_service.submit(ctx, SPEC, ADMIN)
    with ctx.db.tx() as s:
        idempotency.remember(s, "admin", "raced", "fp", winner.id, now)
    with pytest.raises(idempotency.KeyTaken), ctx.db.tx() as s:
        job = job_repo.insert_job(s, SPEC, "admin", now)
        idempotency.remember(s, "admin", "raced", "fp", job.id, now)
    assert _jobs(ctx) == 1  # the loser's job went with its transaction


def test_a_submission_that_loses_the_race_for_its_key_answers_with_the_winners_job(
    ctx: HeadContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group commit's look-up missed a key a concurrent request committed just after: its
    insert of the key fails, its job goes with its transaction, and it is tried once more, which
    replays the winner's job (as when both had arrived in one group)."""
    winner, _ = GroupCommit(ctx).submit(SPEC, ADMIN, "raced")
    seen = idempotency.find_many
    looks: list[int] = []

    def late(s: Tx, keys: list[tuple[str, str]], now: datetime) -> dict[tuple[str, str], tuple[int, str]]:
        looks.append(len(keys))
        return {} if len(looks) == 1 else seen(s, keys, now)  # the first look ran before the winner's commit

    monkeypatch.setattr(idempotency, "find_many", late)
    job, replayed = GroupCommit(ctx).submit(SPEC, ADMIN, "raced")
    assert (job.id, replayed, looks, _jobs(ctx)) == (winner.id, True, [1, 1], 1)

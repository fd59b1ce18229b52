"""Aging (issue 34 item 5): with ``gpupool up --max-wait``, a job that has waited that long goes
before every job that has not, the longest waiting first, so a stream of a favoured project's
small jobs cannot keep a big job waiting for ever. Quotas and limits still hold, it stops nobody,
``gpupool why`` says so, and without the setting nothing changes.

Each scenario is one cycle on a fake clock: the snapshot's ``now`` is set hours after the jobs
were submitted (``tests/sim/test_sim_aging.py`` replays the whole stream)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from gpupool import knobs
from gpupool.domain.decisions import ReasonCode
from gpupool.domain.errors import InvalidInput
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import Snapshot
from gpupool.scheduler import SchedulerConfig, aging, schedule
from gpupool.scheduler.config import MAX_WAIT_BOUND_S
from gpupool.scheduler.policies import preset
from gpupool.settings import Settings
from tests.support.builders import T0, node, pending, running, snapshot

HOUR = 3600.0
AGING = SchedulerConfig(max_wait_s=6 * HOUR)


def at(snap: Snapshot, hours: float) -> Snapshot:
    return replace(snap, now=T0 + timedelta(hours=hours))


def started(snap: Snapshot, config: SchedulerConfig | None = None) -> list[int]:
    return [s.job_id for s in schedule(snap, config).starts]


def favoured_stream() -> Snapshot:
    """Eight GPUs, no quotas. ``fav`` (weight 3 of 5: a share of 4.8) holds 5 and has just queued
    a 1-GPU job (2); ``other`` (a share of 1.6) holds 2 and queued a 4-GPU job (1) at T0. ``fav`` is
    less far above its share, so its job goes first each time a GPU comes free, and job 1 never
    gets four."""
    held = [running(90, ("n1", (0, 1)), project="other")]
    held += [running(90 + g, ("n1", (g + 1,)), project="fav") for g in range(1, 6)]
    projects = [Project("fav", weight=3), Project("other"), Project("default")]
    return snapshot([node("n1", 8)], [pending(1, gpus=4, project="other", at=0)], held, projects)


def with_fresh_small_job(snap: Snapshot, hours: float) -> Snapshot:
    small = pending(2, project="fav", at=hours * HOUR - 60)
    return at(replace(snap, pending=(*snap.pending, small)), hours)


def test_a_stream_of_small_jobs_keeps_the_big_job_waiting_without_aging() -> None:
    for hours in (1, 5, 7, 30):
        assert started(with_fresh_small_job(favoured_stream(), hours)) == [2]


def test_past_the_max_wait_the_big_job_goes_first_and_the_free_gpu_is_held_for_it() -> None:
    assert started(with_fresh_small_job(favoured_stream(), 5), AGING) == [2]  # not yet: 5h < 6h
    result = schedule(with_fresh_small_job(favoured_stream(), 7), AGING)
    assert result.starts == ()  # the free GPU is reserved for job 1; the small job may not take it
    assert result.pending[2].code is ReasonCode.BACKFILL and "job 1, first in line" in result.pending[2].message
    assert result.pending[1].message.endswith("; waited 7h, over --max-wait 6h: it goes first")
    assert result.preemptions == ()  # aging stops nobody


def test_once_the_gpus_it_needs_are_free_the_aged_job_starts_before_the_stream() -> None:
    snap = with_fresh_small_job(favoured_stream(), 7)
    freed = replace(snap, running=tuple(r for r in snap.running if r.id not in (91, 92, 93)))  # four free
    assert started(freed) == [2]  # without aging fav's job takes one first: three are not enough
    assert started(freed, AGING) == [1]
    assert started(replace(freed, running=freed.running[:1]), AGING) == [1, 2]  # room for both: both start


def three_projects() -> Snapshot:
    """Four free GPUs; a, b and c each queued a 2-GPU job, a's 1h ago, b's 7h ago, c's 8h ago.
    By fair share (all hold nothing) the names decide: a, then b."""
    jobs = [pending(1, gpus=2, project="a", at=9 * HOUR), pending(2, gpus=2, project="b", at=3 * HOUR)]
    jobs.append(pending(3, gpus=2, project="c", at=2 * HOUR))
    return at(snapshot([node("n1", 4)], jobs), 10)


def test_aged_jobs_go_first_the_longest_waiting_first() -> None:
    assert started(three_projects()) == [1, 2]
    assert started(three_projects(), AGING) == [3, 2]
    assert started(three_projects(), replace(AGING, max_wait_s=7.5 * HOUR)) == [3, 1]  # only c's is aged


def test_the_wait_runs_from_a_requeue() -> None:
    snap = three_projects()
    requeued = replace(snap.pending[2], waiting_since=snap.now - timedelta(hours=1))
    snap = replace(snap, pending=(*snap.pending[:2], requeued))
    assert started(snap, AGING) == [2, 1]


def test_limits_still_hold_for_an_aged_job_and_it_stops_nobody() -> None:
    limited = replace(three_projects(), projects=(Project("c", limit=1),))
    result = schedule(limited, AGING)
    assert [s.job_id for s in result.starts] == [2, 1]
    assert result.pending[3].code is ReasonCode.LIMIT
    assert result.pending[3].message.endswith("; waited 8h, over --max-wait 6h: it goes first")
    full = replace(three_projects(), running=(running(9, ("n1", (0, 1, 2, 3)), project="a"),))
    result = schedule(full, AGING)
    assert result.starts == () and result.preemptions == ()


def test_under_greedy_an_aged_job_that_does_not_fit_is_reserved_for() -> None:
    snap = with_fresh_small_job(favoured_stream(), 7)
    greedy = preset("greedy")
    assert started(snap, greedy) == [2]
    assert started(snap, replace(greedy, max_wait_s=6 * HOUR)) == []  # nobody takes the GPU it needs


def test_an_aged_job_its_partition_holds_back_blocks_only_its_own_project() -> None:
    """fifo-isolated blocks a project's queue behind its first job; c's aged job, held back by
    c's quota, must not hold up b's aged job, though it comes first among the aged."""
    isolated = replace(preset("fifo-isolated", partition="gpus"), max_wait_s=6 * HOUR)
    snap = replace(
        three_projects(),
        projects=(Project("a", quota=2), Project("b", quota=2), Project("c", quota=1)),
        running=(running(9, ("n1", (3,)), project="c"),),
    )
    result = schedule(snap, isolated)
    assert [s.job_id for s in result.starts] == [2]
    assert result.pending[3].code is ReasonCode.QUOTA and "waited 8h" in result.pending[3].message


def test_a_max_wait_no_job_has_reached_changes_no_decision_and_wakes_the_cycle_when_one_does() -> None:
    for snap in (three_projects(), with_fresh_small_job(favoured_stream(), 5)):
        off, on = schedule(snap), schedule(snap, replace(AGING, max_wait_s=12 * HOUR))
        assert (on.starts, on.pending, on.preemptions) == (off.starts, off.pending, off.preemptions)
        assert off.wake_at is None
    on = schedule(three_projects(), replace(AGING, max_wait_s=12 * HOUR))
    assert on.wake_at == T0 + timedelta(hours=2 + 12)  # c's job, the oldest, reaches it first


def test_the_note_says_the_wait_in_whole_units_and_the_max_wait_as_given() -> None:
    assert aging.note(7 * HOUR + 59 * 60, 6 * HOUR) == "; waited 7h, over --max-wait 6h: it goes first"
    assert aging.note(95 * 60, 90 * 60) == "; waited 1h, over --max-wait 90m: it goes first"
    assert aging.note(50, 45) == "; waited 50s, over --max-wait 45s: it goes first"
    assert aging.note(3 * 86400, 2 * 86400) == "; waited 3d, over --max-wait 2d: it goes first"


def test_the_head_setting_reaches_the_scheduler_and_is_off_by_default() -> None:
    assert knobs.MAX_WAIT.default == 0 and SchedulerConfig().max_wait_s == 0
    assert Settings(Path("/x")).scheduler_config.max_wait_s == 0
    assert Settings(Path("/x"), max_wait_s=6 * HOUR).scheduler_config.max_wait_s == 6 * HOUR
    assert knobs.MAX_WAIT.read(knobs.MAX_WAIT, "6h") == 6 * HOUR
    assert knobs.MAX_WAIT.high == MAX_WAIT_BOUND_S
    with pytest.raises(InvalidInput, match="--max-wait must be between 0s and 30d"):
        knobs.MAX_WAIT.read(knobs.MAX_WAIT, "31d")

"""Within a project, the jobs of whoever used less go first (issue 13, owners and accounting).

One student's 500 queued jobs must not starve a colleague in the same project: the user with the
least load (half what they hold in the project now, this cycle's starts included, half what they
held lately) goes next, within a priority class; a higher class still goes first, one user's jobs
keep their age order, and the FIFO presets stay FIFO. ``gpupool why`` says when a job waits
behind later jobs of users who used less."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.errors import InvalidInput
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, Snapshot
from gpupool.scheduler import SchedulerConfig, schedule
from gpupool.scheduler.cycle import open_session
from gpupool.scheduler.plugins import users
from gpupool.scheduler.policies import preset
from gpupool.scheduler.registry import job_order
from gpupool.scheduler.user_queue import UserQueue
from gpupool.sim.cluster import uniform
from gpupool.sim.engine import simulate
from gpupool.sim.trace import load
from tests.support.builders import node, pending, running, snapshot


def started(snap: Snapshot, config: SchedulerConfig | None = None) -> list[int]:
    return [s.job_id for s in schedule(snap, config).starts]


def crowded(free_gpus: int, *, held_by_alice: int = 0, held_by_zed: int = 0) -> Snapshot:
    """Alice queued jobs 1-4 first, Bob jobs 5-6 after; both in ``default``, one GPU each. Zed
    (same project, nothing queued) may hold GPUs too."""
    gpus = free_gpus + held_by_alice + held_by_zed
    held = [running(99, ("n1", tuple(range(held_by_alice))), owner="alice")] if held_by_alice else []
    if held_by_zed:
        held.append(running(98, ("n1", tuple(range(held_by_alice, held_by_alice + held_by_zed))), owner="zed"))
    queue = [pending(i, owner="alice") for i in range(1, 5)] + [pending(i, owner="bob") for i in (5, 6)]
    return snapshot([node("n1", gpus)], queue, held)


def test_the_user_who_holds_less_goes_first_though_queued_later() -> None:
    assert started(crowded(1, held_by_alice=1)) == [5]


def test_every_start_counts_so_two_users_take_turns_and_each_keeps_their_own_order() -> None:
    # Loads 0/0: the older job (Alice's 1); then Bob (0 < 0.5); 0.5/0.5: the older (Alice's 2); then Bob.
    assert started(crowded(4)) == [1, 5, 2, 6]


@pytest.mark.parametrize("policy", ["fifo", "fifo-isolated"])
def test_the_fifo_presets_keep_pure_submit_order(policy: str) -> None:
    assert started(crowded(4), preset(policy)) == [1, 2, 3, 4]
    assert started(crowded(1, held_by_alice=1), preset(policy)) == [1]


def test_greedy_orders_users_too() -> None:
    assert started(crowded(1, held_by_alice=1), preset("greedy")) == [5]


def test_recent_usage_counts_half_and_what_is_held_now_half() -> None:
    # Alice holds 2 now and used nothing lately (load 1); Bob holds nothing but used 3 lately (1.5).
    snap = replace(crowded(1, held_by_alice=2), user_usage={("default", "bob"): 3.0})
    assert started(snap) == [1]
    # Used 1.9 lately: load 0.95 < 1, Bob goes first.
    assert started(replace(snap, user_usage={("default", "bob"): 1.9})) == [5]
    # What Alice used lately adds to what she holds.
    assert started(replace(crowded(1), user_usage={("default", "alice"): 0.5})) == [5]


def test_a_higher_priority_class_still_goes_first() -> None:
    # Alice holds the most, but her interactive job outranks Bob's train jobs.
    snap = crowded(1, held_by_alice=1)
    snap = replace(snap, pending=(*snap.pending, pending(7, owner="alice", priority="interactive")))
    assert started(snap) == [7]


def test_users_are_compared_within_their_project_only() -> None:
    """Alice holds 2 GPUs in project a; in project b she holds nothing, so there her older job
    goes before Bob's."""
    snap = snapshot(
        [node("n1", 3)],
        [pending(1, project="b", owner="alice"), pending(2, project="b", owner="bob")],
        [running(9, ("n1", (0, 1)), project="a", owner="alice")],
        [Project("a", quota=2), Project("b", quota=1)],
    )
    assert started(snap) == [1]


def test_a_job_of_a_user_who_used_more_says_whose_later_jobs_go_first() -> None:
    result = schedule(crowded(0, held_by_alice=1))
    alice, bob = result.pending[1], result.pending[5]
    assert alice.code is ReasonCode.RESOURCES
    assert alice.message.endswith("; later jobs of bob go first: bob used less of project default lately")
    assert "used less" not in bob.message  # Bob's jobs are first in line
    # With equal loads, age decides, and nobody is said to go first for having used less.
    even = schedule(crowded(0, held_by_zed=1)).pending
    assert even[1].code is ReasonCode.RESOURCES
    assert all("used less" not in r.message for r in even.values())


def test_the_note_names_only_lighter_users_with_later_jobs() -> None:
    queue = [
        pending(1, owner="carol"),  # before Alice's job: ahead of it anyway
        pending(2, owner="alice"),
        pending(3, owner="bob"),
        pending(4, owner="carol"),
        pending(5, owner="dave"),
        pending(6, owner="erin", at=3.5),
    ]
    snap = replace(
        snapshot([node("n1", 1)], queue, [running(9, ("n1", (0,)), owner="zed")]),
        user_usage={  # loads: bob 0.5 < carol 1 < dave 1.5 < erin 3.5 < alice 4.5
            ("default", "alice"): 9.0,
            ("default", "bob"): 1.0,
            ("default", "carol"): 2.0,
            ("default", "dave"): 3.0,
            ("default", "erin"): 7.0,
        },
    )
    reasons = schedule(snap).pending
    notes = {i: r.message.partition("; later jobs of ")[2] for i, r in reasons.items()}
    assert notes == {
        1: "bob go first: bob used less of project default lately",
        2: "bob, carol and 2 more go first: they used less of project default lately",
        3: "",  # Bob used least
        4: "",  # Bob's only job came before Carol's second
        5: "",  # Dave's job came after every lighter user's
        6: "carol and dave go first: they used less of project default lately",  # not Bob's
    }


def test_the_fifo_presets_never_say_users_go_first() -> None:
    reasons = schedule(crowded(0, held_by_alice=1), preset("fifo")).pending
    assert all("used less" not in r.message for r in reasons.values())


def test_a_user_queue_recomputes_a_load_that_grew_before_it_is_taken() -> None:
    """Starting a job raises its user's load after the next head was queued: the queue must look
    again rather than hand out the stale order."""
    snap = crowded(4)
    session = open_session(snap, SchedulerConfig())
    queue = UserQueue(session, users.LEAST_USED, job_order("priority_fifo"))
    for job in session.queue:
        queue.append(job)
    order: list[PendingJob] = []
    while queue:
        job = queue.popleft()
        order.append(job)
        key = (job.spec.project, job.owner)
        session.user_started[key] = session.user_started.get(key, 0.0) + 1  # as record_start does
    assert [j.id for j in order] == [1, 5, 2, 6, 3, 4]


def test_the_simulator_orders_users_by_what_they_hold(tmp_path: Path) -> None:
    """The trace's ``user`` column names the owner; the simulator keeps no usage history, so
    what users hold now decides."""
    path = tmp_path / "trace.csv"
    rows = ["a1,0,100,1,alice", "a2,0,100,1,alice", "a3,0,100,1,alice", "a4,0,100,1,alice", "b1,1,100,1,bob"]
    path.write_text("job_id,submit_time,duration,gpus,user\n" + "\n".join(rows) + "\n")
    jobs = load(path)
    assert [j.user for j in jobs] == ["alice"] * 4 + ["bob"]

    def first_starts(config: SchedulerConfig) -> dict[str, float | None]:
        return {r.trace.job_id: r.first_start for r in simulate(jobs, uniform(1, 2), [], config).runs.values()}

    # At t=100 Alice's first two end: her third (oldest) and Bob's (he holds nothing) start.
    assert first_starts(SchedulerConfig()) == {"a1": 0, "a2": 0, "a3": 100, "b1": 100, "a4": 200}
    assert first_starts(preset("fifo")) == {"a1": 0, "a2": 0, "a3": 100, "a4": 100, "b1": 200}


def test_a_trace_user_must_be_a_valid_name(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("job_id,submit_time,duration,gpus,user\nj,0,1,1,no spaces\n")
    with pytest.raises(InvalidInput, match=r"trace\.csv:2: invalid user name 'no spaces'"):
        load(path)

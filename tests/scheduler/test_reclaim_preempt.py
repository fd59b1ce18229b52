"""Reclaim and preempt scenarios: who is stopped, who is spared, and what the waiting job is told."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import RunningJob, Snapshot
from gpupool.scheduler import schedule
from gpupool.scheduler.config import SchedulerConfig
from tests.support.builders import T0, node, pending, running, snapshot

AB = [Project("a", quota=4), Project("b", quota=4)]


def started(job: RunningJob, seconds: int) -> RunningJob:
    return replace(job, started_at=T0 + timedelta(seconds=seconds))


def a_fills_the_cluster() -> list[RunningJob]:
    """Project a holds all 8 GPUs with 1-GPU train jobs, started one second apart (id 10 oldest)."""
    return [started(running(10 + i, (f"n{1 + i // 4}", (i % 4,)), project="a"), i) for i in range(8)]


def test_b_below_quota_reclaims_exactly_what_it_needs_from_the_youngest_borrowers() -> None:
    result = schedule(
        snapshot(
            [node("n1"), node("n2")], [pending(1, project="b"), pending(2, project="b")], a_fills_the_cluster(), AB
        )
    )
    assert result.starts == ()
    assert sorted(p.job_id for p in result.preemptions) == [16, 17]  # the two most recently started
    for job_id in (1, 2):
        assert result.pending[job_id].code is ReasonCode.RECLAIM
        assert "stopping 1 job(s) of a" in result.pending[job_id].message
    assert all("borrowed beyond its quota" in p.message for p in result.preemptions)


def test_reclaim_never_takes_the_lender_below_its_quota() -> None:
    queue = [pending(i, project="b") for i in range(1, 7)]  # b asks for 6, its quota is 4
    result = schedule(snapshot([node("n1"), node("n2")], queue, a_fills_the_cluster(), AB))
    assert len(result.preemptions) == 4  # a keeps its quota of 4
    assert sorted(p.job_id for p in result.preemptions) == [14, 15, 16, 17]
    assert [result.pending[i].code for i in (5, 6)] == [ReasonCode.RESOURCES, ReasonCode.RESOURCES]


def test_no_reclaim_beyond_the_quota_of_the_waiting_project() -> None:
    projects = [Project("a", quota=4), Project("b", quota=1)]
    result = schedule(
        snapshot([node("n1"), node("n2")], [pending(1, project="b", gpus=2)], a_fills_the_cluster(), projects)
    )
    assert result.preemptions == ()
    assert result.pending[1].code is ReasonCode.RESOURCES


def test_interactive_jobs_of_a_borrower_are_never_reclaimed() -> None:
    held = [
        started(
            running(10 + i, (f"n{1 + i // 4}", (i % 4,)), project="a", priority="interactive" if i >= 4 else "train"), i
        )
        for i in range(8)
    ]
    projects = [Project("a", quota=8), Project("b", quota=4)]  # a borrows nothing: quota covers all
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, project="b")], held, projects))
    assert result.preemptions == ()
    held_train_only = [
        started(
            running(10 + i, (f"n{1 + i // 4}", (i % 4,)), project="a", priority="interactive" if i < 4 else "train"), i
        )
        for i in range(8)
    ]
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, project="b")], held_train_only, AB))
    assert [p.job_id for p in result.preemptions] == [17]
    assert all(p.job_id >= 14 for p in result.preemptions)


def test_jobs_already_stopping_are_counted_so_nothing_is_preempted_twice() -> None:
    held = a_fills_the_cluster()
    held[-1] = replace(held[-1], stopping=True)  # job 17 is already being preempted
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, project="b")], held, AB))
    assert result.preemptions == ()
    assert result.pending[1].code is ReasonCode.RECLAIM
    assert "being stopped" in result.pending[1].message


def test_a_gang_reclaims_whole_nodes_worth_and_spares_what_it_does_not_need() -> None:
    # b needs 4 GPUs on one node: the victims must all be on the same node, the fewest possible
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, project="b", gpus=4)], a_fills_the_cluster(), AB))
    victims = sorted(p.job_id for p in result.preemptions)
    assert victims == [14, 15, 16, 17]  # node n2's four jobs, the youngest


def test_inside_a_project_interactive_displaces_the_youngest_train_job() -> None:
    held = [started(running(10 + i, ("n1", (i,)), project="a"), i) for i in range(4)]
    projects = [Project("a", quota=4)]
    result = schedule(snapshot([node("n1")], [pending(1, project="a", priority="interactive")], held, projects))
    assert [p.job_id for p in result.preemptions] == [13]
    assert result.pending[1].code is ReasonCode.PREEMPTING


def test_inference_never_displaces_interactive_and_train_never_displaces_anything() -> None:
    held = [started(running(10 + i, ("n1", (i,)), project="a", priority="interactive"), i) for i in range(4)]
    projects = [Project("a", quota=8)]
    queue = [pending(1, project="a", priority="inference"), pending(2, project="a", priority="train")]
    result = schedule(snapshot([node("n1")], queue, held, projects))
    assert result.preemptions == ()
    assert result.pending[1].code is ReasonCode.RESOURCES


def test_a_gpu_being_freed_is_promised_to_the_first_job_that_can_use_it() -> None:
    """Found by the reclaim property: one GPU, held by a job that is being stopped; the share ahead
    in line claims it, the whole-GPU job behind waits for resources rather than claiming it too."""
    held = [replace(running(1, ("n0", (0,)), project="a"), stopping=True)]
    queue = [pending(10, gpus=0.25, project="a"), pending(12, gpus=1, project="a")]
    result = schedule(snapshot([node("n0", 1)], queue, held, [Project("a", quota=2)]))
    assert result.starts == () and result.preemptions == ()
    assert result.pending[10].code is ReasonCode.RECLAIM and "being stopped" in result.pending[10].message
    assert result.pending[12].code is ReasonCode.RESOURCES


def test_an_interactive_job_reclaim_cannot_help_still_displaces_its_own_train_jobs() -> None:
    # a is below its quota, so reclaim looks first and finds nobody borrowing (b is within its
    # own quota); preempt must still displace a's own youngest train job
    held = [
        started(running(10, ("n1", (0,)), project="a"), 0),
        started(running(11, ("n1", (1,)), project="a"), 1),
        started(running(12, ("n1", (2,)), project="b", priority="interactive"), 2),
        started(running(13, ("n1", (3,)), project="b", priority="interactive"), 3),
    ]
    projects = [Project("a", quota=4), Project("b", quota=2)]
    result = schedule(snapshot([node("n1")], [pending(1, project="a", priority="interactive")], held, projects))
    assert [p.job_id for p in result.preemptions] == [11]
    assert result.pending[1].code is ReasonCode.PREEMPTING


def _at(seconds: float, *args: object) -> Snapshot:
    return replace(snapshot(*args), now=T0 + timedelta(seconds=seconds))  # type: ignore[arg-type]


MIN_RUN = SchedulerConfig(reclaim_min_run_s=600.0)


def test_with_a_minimum_run_young_borrowers_are_spared_and_the_waiting_jobs_told_when() -> None:
    queue = [pending(1, project="b"), pending(2, project="b")]
    young = _at(300, [node("n1"), node("n2")], queue, a_fills_the_cluster(), AB)  # a's jobs ran 293-300 s
    result = schedule(young, MIN_RUN)
    assert result.preemptions == () and result.starts == ()
    for job_id in (1, 2):  # both told, the second too (same shape as the first)
        reason = result.pending[job_id]
        assert reason.code is ReasonCode.RECLAIM, reason
        assert "borrowed beyond quota, taken back once they have run 10m" in reason.message
    assert "(the first in 5m)" in result.pending[1].message  # job 17 has run 293 s of 600
    assert result.wake_at == T0 + timedelta(seconds=606)  # when job 16 has run 600 s: a cycle is due
    assert schedule(young).preemptions != ()  # without the minimum: reclaimed at once


def test_with_a_minimum_run_the_youngest_borrowers_that_ran_it_are_reclaimed() -> None:
    queue = [pending(1, project="b"), pending(2, project="b")]
    result = schedule(_at(605, [node("n1"), node("n2")], queue, a_fills_the_cluster(), AB), MIN_RUN)
    assert sorted(p.job_id for p in result.preemptions) == [14, 15]  # 16 and 17 ran 599 and 598 s
    assert all("stopping 1 job(s) of a" in result.pending[i].message for i in (1, 2))
    result = schedule(_at(607, [node("n1"), node("n2")], queue, a_fills_the_cluster(), AB), MIN_RUN)
    assert sorted(p.job_id for p in result.preemptions) == [16, 17]  # all ran it: the youngest go


def test_with_a_minimum_run_a_borrower_still_starting_is_reclaimed_at_once() -> None:
    held = a_fills_the_cluster()
    held[-1] = replace(held[-1], started_at=None)  # job 17 has not started: it would lose no work
    result = schedule(_at(300, [node("n1"), node("n2")], [pending(1, project="b")], held, AB), MIN_RUN)
    assert [p.job_id for p in result.preemptions] == [17]

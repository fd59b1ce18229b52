"""Per-user limits inside a project (issue 34 item 4): what one user's jobs may hold at once.

Scenarios for the limit, a user's own figure, GPUs coming back, starts within one cycle, GPU
shares, the actions that stop jobs (none stops one for a job its user's limit holds back), and
properties: no user beyond their limit, and a limit never reached changes no decision."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.decisions import CycleResult, ReasonCode
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import schedule
from gpupool.scheduler.config import SchedulerConfig
from tests.support.builders import T0, clusters, node, pending, running, snapshot


def vision(**limits: float | None) -> Project:
    """Project vision, quota 8, with ``user_limit`` (key "") and users' own figures."""
    per_user = {user: value for user, value in limits.items() if user != "every"}
    return Project.create("vision", quota=8, user_limit=limits.get("every"), user_limits=per_user)


def job(job_id: int, owner: str, gpus: float = 1, **kw: object) -> PendingJob:
    return pending(job_id, gpus=gpus, project="vision", owner=owner, **kw)  # type: ignore[arg-type]


def held(job_id: int, owner: str, *gpus: int, node_name: str = "n1", share: float = 0.0) -> RunningJob:
    return running(job_id, (node_name, gpus), project="vision", owner=owner, share=share)


def started_ids(result: CycleResult) -> list[int]:
    return sorted(s.job_id for s in result.starts)


def test_a_user_at_their_limit_waits_while_another_user_starts() -> None:
    result = schedule(
        snapshot([node("n1", 8)], [job(1, "ann"), job(2, "bob")], [held(10, "ann", 0, 1)], [vision(every=2)])
    )
    assert started_ids(result) == [2]
    reason = result.pending[1]
    assert reason.code is ReasonCode.USER_LIMIT
    assert reason.message == (
        "user limit: ann holds 2 of their 2 GPUs in project vision (--user-limit); this job needs 1 more"
    )


def test_a_users_own_figure_overrides_the_projects_and_none_exempts_them() -> None:
    running_jobs = [held(10, "ann", 0, 1), held(11, "bob", 2, 3), held(12, "cy", 4, 5)]
    queue = [job(1, "ann"), job(2, "bob"), job(3, "cy", gpus=2)]
    result = schedule(snapshot([node("n1", 12)], queue, running_jobs, [vision(every=2, ann=3, cy=None)]))
    assert started_ids(result) == [1, 3]  # ann up to her 3; cy has no limit
    assert result.pending[2].code is ReasonCode.USER_LIMIT
    assert "bob holds 2 of their 2 GPUs" in result.pending[2].message
    ann_again = schedule(snapshot([node("n1", 8)], [job(1, "ann", gpus=2)], running_jobs, [vision(every=2, ann=3)]))
    assert ann_again.pending[1].message == (
        "user limit: ann holds 2 of their 3 GPUs in project vision (--user-limit ann=3); this job needs 2 more"
    )


def test_the_job_starts_once_one_of_its_users_jobs_ends() -> None:
    queue, projects = [job(1, "ann")], [vision(every=2)]
    both = [held(10, "ann", 0), held(11, "ann", 1)]
    assert schedule(snapshot([node("n1", 8)], queue, both, projects)).pending[1].code is ReasonCode.USER_LIMIT
    assert started_ids(schedule(snapshot([node("n1", 8)], queue, both[:1], projects))) == [1]


def test_jobs_started_earlier_in_the_same_cycle_count() -> None:
    queue = [job(i, "ann") for i in range(1, 5)] + [job(5, "bob")]
    result = schedule(snapshot([node("n1", 8)], queue, [], [vision(every=2)]))
    assert started_ids(result) == [1, 2, 5]
    for job_id in (3, 4):
        assert result.pending[job_id].code is ReasonCode.USER_LIMIT
        assert "ann holds 2 of their 2 GPUs" in result.pending[job_id].message


def test_a_fractional_gpu_counts_by_its_share() -> None:
    running_jobs = [held(10, "ann", 0, share=0.5)]
    queue = [job(1, "ann", gpus=0.5, gpu_memory="20G"), job(2, "ann", gpus=0.25, gpu_memory="10G")]
    result = schedule(snapshot([node("n1", 8)], queue, running_jobs, [vision(every=1)]))
    assert started_ids(result) == [1]
    assert result.pending[2].message == (
        "user limit: ann holds 1 of their 1 GPUs in project vision (--user-limit); this job needs 0.25 more"
    )


def test_a_job_larger_than_the_limit_says_so_and_blocks_nobody() -> None:
    # Strict FIFO: a job that cannot start holds up every queue, but not one its owner's limit holds back.
    fifo = SchedulerConfig(actions=("allocate",), job_order="fifo", queue_order="single", user_order="none")
    fifo = replace(fifo, blocking="all")
    result = schedule(snapshot([node("n1", 8)], [job(1, "ann", gpus=4), job(2, "bob")], [], [vision(every=2)]), fifo)
    assert started_ids(result) == [2]
    assert result.pending[1].message.endswith(
        "this job needs 4, more than that: it starts only once the limit is raised"
    )


def test_backfill_counts_the_jobs_it_started_before() -> None:
    """A job first in line reserves the free GPUs; jobs that end before it may start there
    meanwhile (backfill), but no more of one user's than their limit."""
    fifo = SchedulerConfig(job_order="priority_fifo", user_order="none")
    other = running(10, ("n1", (0, 1, 2, 3)), project="vision", owner="ops", max_runtime_s=3600)
    queue = [pending(1, gpus=4, workers=2, project="vision", owner="ops")]
    queue += [job(i, "ann", max_runtime_s=60) for i in (2, 3, 4)]
    result = schedule(snapshot([node("n1"), node("n2")], queue, [other], [vision(ann=2)]), fifo)
    assert started_ids(result) == [2, 3]
    assert result.pending[1].code is ReasonCode.RESOURCES
    assert result.pending[4].code is ReasonCode.USER_LIMIT


def test_reclaim_stops_no_job_for_a_job_its_users_limit_holds_back() -> None:
    lender = [
        replace(running(10 + i, ("n1", (i,)), project="a"), started_at=T0 + timedelta(seconds=i)) for i in range(4)
    ]
    projects = [Project("a", quota=0), Project.create("vision", quota=4, user_limit=1)]
    queue = [job(1, "ann"), job(2, "ann")]
    result = schedule(snapshot([node("n1")], queue, lender, projects))
    assert [p.job_id for p in result.preemptions] == [13]  # one GPU for ann's first job, none for her second
    assert result.pending[1].code is ReasonCode.RECLAIM
    assert result.pending[2].code is ReasonCode.USER_LIMIT
    assert "(GPUs being freed for their other jobs included)" in result.pending[2].message
    at_limit = schedule(snapshot([node("n1")], queue[1:], [*lender[:3], held(20, "ann", 3)], projects))
    assert at_limit.preemptions == () and at_limit.pending[2].code is ReasonCode.USER_LIMIT


def test_an_interactive_job_over_its_users_limit_displaces_no_train_job() -> None:
    train = [held(10 + i, "bob", i) for i in range(4)]
    interactive = job(1, "ann", priority="interactive")
    base = schedule(snapshot([node("n1")], [interactive], train, [vision()]))
    assert [p.job_id for p in base.preemptions] == [13]  # without a limit it displaces one
    ann_at_limit = [*train[:3], held(20, "ann", 3)]
    result = schedule(snapshot([node("n1")], [interactive], ann_at_limit, [vision(ann=1)]))
    assert result.preemptions == ()
    assert result.pending[1].code is ReasonCode.USER_LIMIT
    two = [interactive, job(2, "ann", priority="interactive")]  # the GPU freed for the first counts
    promised = schedule(snapshot([node("n1")], two, train, [vision(ann=1)]))
    assert [p.job_id for p in promised.preemptions] == [13]
    assert promised.pending[2].code is ReasonCode.USER_LIMIT


def test_displace_stops_no_job_for_a_job_its_users_limit_holds_back() -> None:
    """Under the least-attained order, new jobs displace long-running checkpointed ones; one of
    ann's two new jobs may, the other would take her over her limit of 1."""
    long_run = timedelta(hours=2)
    spec = replace(running(9, ("n1", (0,))).spec, checkpoint_dir="/ckpt", project="vision")
    busy = [RunningJob(10 + i, spec, (running(0, ("n1", (i,))).placements), T0 - long_run) for i in range(2)]
    queue = [job(1, "ann"), job(2, "ann")]
    free = schedule(snapshot([node("n1", 2)], queue, busy, [vision()]))
    assert len(free.preemptions) == 2  # without a limit both displace one
    result = schedule(snapshot([node("n1", 2)], queue, busy, [vision(ann=1)]))
    assert len(result.preemptions) == 1
    assert result.pending[2].code is ReasonCode.USER_LIMIT


OWNERS = ["ann", "bob", "cy"]


@st.composite
def owned_clusters(draw: st.DrawFn) -> tuple[list, list[PendingJob]]:  # type: ignore[type-arg]
    nodes, jobs = draw(clusters())
    return nodes, [replace(j, owner=draw(st.sampled_from(OWNERS))) for j in jobs]


@settings(max_examples=150, deadline=None)
@given(owned_clusters(), st.sampled_from([0.5, 1, 2, 4]))
def test_no_user_starts_beyond_their_limit(cluster: tuple[list, list[PendingJob]], limit: float) -> None:  # type: ignore[type-arg]
    nodes, jobs = cluster
    projects = [Project.create("default", quota=64, user_limit=limit, user_limits={"cy": limit * 2})]
    result = schedule(snapshot(nodes, jobs, [], projects))
    by_id = {j.id: j for j in jobs}
    for user in OWNERS:
        total = sum(by_id[s.job_id].spec.total_gpus for s in result.starts if by_id[s.job_id].owner == user)
        assert total <= (limit * 2 if user == "cy" else limit) + 1e-9


@settings(max_examples=150, deadline=None)
@given(owned_clusters())
def test_a_limit_never_reached_changes_no_decision(cluster: tuple[list, list[PendingJob]]) -> None:  # type: ignore[type-arg]
    nodes, jobs = cluster
    plain = schedule(snapshot(nodes, jobs, [], [Project.create("default", quota=64)]))
    limited = schedule(snapshot(nodes, jobs, [], [Project.create("default", quota=64, user_limit=1000)]))
    assert limited == plain

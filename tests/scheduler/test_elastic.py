"""Elastic jobs in the scheduler (issue 35): they start at their minimum, grow into free GPUs while
nothing of equal or higher standing waits and within every limit, and give back the workers above
their minimum before any whole job is stopped (reclaim, priority preemption)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.decisions import CycleResult, ReasonCode
from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import RunningJob
from gpupool.scheduler import schedule
from gpupool.scheduler.actions.grow import grow_note
from gpupool.scheduler.cluster import ClusterState
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import open_session
from gpupool.scheduler.incremental import CycleMemory
from tests.support.builders import T0, node, pending, running, snapshot


def elastic(
    job_id: int,
    workers: str,
    *gpus_on: tuple[str, int],
    project: str = "default",
    priority: str = "train",
    leaving: frozenset[int] = frozenset(),
) -> RunningJob:
    """A running elastic job of 1-GPU workers, worker ``i`` on ``gpus_on[i]`` (node, GPU)."""
    spec = JobSpec.create(command=["true"], gpus=1, workers=workers, project=project, priority=priority)
    placements = tuple(Placement(w, n, (g,)) for w, (n, g) in enumerate(gpus_on))
    return RunningJob(job_id, spec, placements, T0, leaving=leaving)


def on(name: str, count: int, first: int = 0) -> list[tuple[str, int]]:
    return [(name, first + i) for i in range(count)]


def test_a_waiting_elastic_job_starts_at_its_minimum() -> None:
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, workers="2:8")]))
    assert [len(s.placements) for s in result.starts] == [2]
    assert result.grows == ()  # it grows from the next cycle on, once it runs


def test_a_waiting_elastic_job_needs_only_its_minimum_within_its_quota() -> None:
    projects = [Project("a", quota=2, limit=2)]
    result = schedule(snapshot([node("n1")], [pending(1, workers="2:8", project="a")], projects=projects))
    assert [s.job_id for s in result.starts] == [1]


def test_a_running_elastic_job_grows_into_free_gpus_up_to_its_maximum() -> None:
    job = elastic(5, "2:6", *on("n1", 2))
    result = schedule(snapshot([node("n1"), node("n2")], [], [job]))
    (grow,) = result.grows
    assert grow.job_id == 5
    assert sorted(p.worker for p in grow.placements) == [2, 3, 4, 5]  # the smallest unused numbers
    assert grow.message.startswith("grew to 6 workers: GPUs free on n")
    taken = [(p.node, g) for p in (*job.placements, *grow.placements) for g in p.gpus]
    assert len(set(taken)) == 6


def test_grow_takes_numbers_no_worker_of_the_run_has_used() -> None:
    # Workers 1 and 2 were shrunk away (the node keeps their run directories and exits), and 4 of
    # this run was too: new workers are numbered from the run's next unused number.
    job = replace(elastic(5, "2:4", ("n1", 0), ("n1", 1), ("n1", 3)), placements=())
    job = replace(job, placements=(Placement(0, "n1", (0,)), Placement(3, "n1", (1,))))
    result = schedule(snapshot([node("n1")], [], [job]))
    assert sorted(p.worker for p in result.grows[0].placements) == [4, 5]
    result = schedule(snapshot([node("n1")], [], [replace(job, next_worker=7)]))
    assert sorted(p.worker for p in result.grows[0].placements) == [7, 8]


def test_no_grow_while_a_job_of_equal_standing_waits_for_gpus() -> None:
    job = elastic(5, "2:8", *on("n1", 2))
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, gpus=4, workers=2)], [job]))
    assert result.grows == ()
    assert result.pending[1].code is not ReasonCode.QUOTA


def test_a_job_held_by_its_quota_does_not_hold_growth_back() -> None:
    projects = [Project("b", limit=1)]
    job = elastic(5, "2:3", *on("n1", 2))
    result = schedule(snapshot([node("n1")], [pending(1, gpus=2, project="b")], [job], projects))
    assert result.pending[1].code is ReasonCode.LIMIT
    assert [len(g.placements) for g in result.grows] == [1]


def test_a_lower_priority_waiting_job_does_not_hold_an_interactive_elastic_job_back() -> None:
    jobs = [elastic(5, "1:2", ("n1", 0), priority="interactive"), running(6, ("n2", (0,)))]
    queue = [pending(1, gpus=4)]  # waits for n2 (held for it): n1's free GPU is not what it needs
    result = schedule(snapshot([node("n1", 2), node("n2")], queue, jobs, [Project("default", quota=4)]))
    assert result.pending[1].code is not ReasonCode.QUOTA
    assert [len(g.placements) for g in result.grows] == [1]
    train = replace(jobs[0], spec=replace(jobs[0].spec, priority=jobs[1].spec.priority))
    assert schedule(snapshot([node("n1", 2), node("n2")], queue, [train, jobs[1]])).grows == ()


def test_grow_stays_within_the_project_limit() -> None:
    projects = [Project("a", quota=2, limit=3)]
    result = schedule(snapshot([node("n1"), node("n2")], [], [elastic(5, "2:8", *on("n1", 2), project="a")], projects))
    assert [len(g.placements) for g in result.grows] == [1]
    assert result.grows[0].message.startswith("grew to 3 workers")


def test_grow_stays_within_the_limit_of_a_unit_above_the_project() -> None:
    projects = [Project("u", limit=4), Project("a", parent="u"), Project("b", parent="u")]
    running_jobs = [elastic(5, "2:8", *on("n1", 2), project="a"), running(6, ("n2", (0,)), project="b")]
    result = schedule(snapshot([node("n1"), node("n2")], [], running_jobs, projects))
    assert [len(g.placements) for g in result.grows] == [1]  # a 3 and b 1: the unit's 4


def test_reclaim_shrinks_the_extra_workers_of_a_borrower_before_stopping_any_whole_job() -> None:
    projects = [Project("a", quota=4), Project("b", quota=4)]
    job = elastic(5, "2:8", *on("n1", 4), *on("n2", 4), project="a")
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, gpus=4, project="b")], [job], projects))
    assert result.preemptions == ()
    (shrink,) = result.shrinks
    assert (shrink.job_id, shrink.workers, shrink.for_job) == (5, (4, 5, 6, 7), 1)
    assert shrink.message == "shrank to 4 workers: reclaimed for project b"
    assert result.pending[1].code is ReasonCode.RECLAIM
    assert "above the minimum of elastic job(s) 5 (a)" in result.pending[1].message


def test_reclaim_never_shrinks_a_lender_below_its_quota() -> None:
    projects = [Project("a", quota=6), Project("b", quota=4)]
    job = elastic(5, "2:8", *on("n1", 4), *on("n2", 4), project="a")
    one = schedule(
        snapshot([node("n1"), node("n2")], [pending(1, project="b"), pending(2, project="b")], [job], projects)
    )
    assert [s.workers for s in one.shrinks] == [(7,), (6,)]  # a keeps 6, its quota
    three = [pending(i, project="b") for i in (1, 2, 3)]
    result = schedule(snapshot([node("n1"), node("n2")], three, [job], projects))
    assert sum(len(s.workers) for s in result.shrinks) == 2
    assert result.preemptions == ()  # a's minimum is within its quota: nothing more is taken
    assert result.pending[3].code is ReasonCode.RESOURCES


def test_priority_preemption_takes_extra_workers_before_whole_train_jobs() -> None:
    projects = [Project("a", quota=8)]
    rigid = running(6, ("n2", (0, 1, 2, 3)), project="a")
    job = elastic(5, "2:4", *on("n1", 4), project="a")
    result = schedule(
        snapshot(
            [node("n1"), node("n2")], [pending(1, gpus=2, priority="interactive", project="a")], [job, rigid], projects
        )
    )
    assert result.preemptions == ()
    (shrink,) = result.shrinks
    assert (shrink.workers, shrink.message) == ((2, 3), "shrank to 2 workers: GPUs for job 1 of project a")
    assert result.pending[1].code is ReasonCode.PREEMPTING


def test_a_minimum_is_never_shrunk_only_the_whole_job_is_preempted() -> None:
    job = elastic(5, "2:4", *on("n1", 4))
    result = schedule(
        snapshot([node("n1")], [pending(1, gpus=4, priority="interactive")], [job], [Project("default", quota=4)])
    )
    assert result.shrinks == ()
    assert [p.job_id for p in result.preemptions] == [5]


def test_a_train_job_of_the_same_project_takes_extra_workers() -> None:
    job = elastic(5, "1:4", *on("n1", 4))
    result = schedule(snapshot([node("n1")], [pending(1, gpus=2)], [job]))
    assert [s.workers for s in result.shrinks] == [(2, 3)]
    assert result.grows == ()  # the job it shrank for waits: it does not grow back


def _extras_and_two_rigid(project: str) -> list[RunningJob]:
    """Elastic job 9 at 4 of 2:4 on n1, the youngest (it would be stopped whole first); rigid
    2-GPU jobs 6 and 7 fill n2."""
    rigid = [running(6, ("n2", (0, 1)), project=project), running(7, ("n2", (2, 3)), project=project)]
    return [elastic(9, "2:4", *on("n1", 4), project=project), *rigid]


def test_reclaim_counts_extra_workers_first_and_stops_whole_jobs_only_for_the_rest() -> None:
    # b needs 4 GPUs: the 2 extras of job 9 are not enough alone, so one whole borrowed job goes
    # too, job 7 (2 GPUs), not the elastic job.
    projects = [Project("a", quota=2), Project("b", quota=4)]
    queue = [pending(1, gpus=2, workers=2, project="b")]
    result = schedule(snapshot([node("n1"), node("n2")], queue, _extras_and_two_rigid("a"), projects))
    assert [(p.job_id, p.for_job) for p in result.preemptions] == [(7, 1)]
    assert [(s.job_id, s.workers, s.for_job) for s in result.shrinks] == [(9, (2, 3), 1)]
    assert result.shrinks[0].message == "shrank to 2 workers: reclaimed for project b"
    assert result.pending[1].code is ReasonCode.RECLAIM
    assert "2 worker(s) above the minimum of elastic job(s) 9 (a)" in result.pending[1].message


def test_priority_preemption_counts_extra_workers_first_and_stops_whole_jobs_only_for_the_rest() -> None:
    projects = [Project("a", quota=12)]
    queue = [pending(1, gpus=2, workers=2, priority="interactive", project="a")]
    result = schedule(snapshot([node("n1"), node("n2")], queue, _extras_and_two_rigid("a"), projects))
    assert [p.job_id for p in result.preemptions] == [7]
    assert [(s.job_id, s.workers) for s in result.shrinks] == [(9, (2, 3))]
    assert result.shrinks[0].message == "shrank to 2 workers: GPUs for job 1 of project a"
    assert result.pending[1].code is ReasonCode.PREEMPTING
    assert "elastic job(s) 9 (a)" in result.pending[1].message


def test_no_extra_worker_is_shrunk_where_no_whole_job_completes_the_need() -> None:
    # a may give back only down to its quota of 5: the extras and one rigid job would take it to 4.
    projects = [Project("a", quota=5), Project("b", quota=4)]
    queue = [pending(1, gpus=2, workers=2, project="b")]
    result = schedule(snapshot([node("n1"), node("n2")], queue, _extras_and_two_rigid("a"), projects))
    assert (result.shrinks, result.preemptions) == ((), ())


def test_leaving_workers_count_as_on_their_way_and_are_not_shrunk_twice() -> None:
    job = elastic(5, "2:8", *on("n1", 4), *on("n2", 4), leaving=frozenset({7}))
    queue = [pending(1, priority="interactive"), pending(2, priority="interactive")]
    result = schedule(snapshot([node("n1"), node("n2")], queue, [job], [Project("default", quota=8)]))
    assert [(s.workers, s.for_job) for s in result.shrinks] == [((6,), 2)]
    assert "waiting for workers being stopped" in result.pending[1].message
    assert result.preemptions == ()


def test_grow_note_says_when_a_running_elastic_job_grows() -> None:
    job = elastic(5, "2:8", *on("n1", 2))
    session = open_session(snapshot([node("n1")], [], [job]), SchedulerConfig())
    assert grow_note(session, job) == (
        "at 2 of 2:8 workers: it grows when GPUs are free and no job of equal or higher priority waits"
    )
    assert grow_note(session, running(6, ("n1", (2,)))) is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 4)), min_size=1, max_size=3),  # (minimum, extras)
    st.integers(0, 8),  # a's quota
    st.integers(1, 6),  # b's waiting 1-GPU jobs
    st.data(),
)
def test_quota_rule_minimums_are_never_shrunk_and_extras_go_before_whole_jobs(
    shapes: list[tuple[int, int]], quota_a: int, waiting: int, data: st.DataObject
) -> None:
    slots = [(f"n{i // 4}", i % 4) for i in range(64)]
    jobs: list[RunningJob] = []
    used = 0
    for i, (least, extra) in enumerate(shapes):
        width = least + extra
        leaving = frozenset(w for w in range(least, width) if data.draw(st.booleans(), label="leaving") and w % 3 == 0)
        jobs.append(elastic(10 + i, f"{least}:{width + 2}", *slots[used : used + width], project="a", leaving=leaving))
        used += width
    rigid = data.draw(st.integers(0, 4), label="rigid")
    jobs += [running(20 + i, (slots[used + i][0], (slots[used + i][1],)), project="a") for i in range(rigid)]
    used += rigid
    nodes = [node(f"n{i}") for i in range((used + 3) // 4)]
    projects = [Project("a", quota=quota_a), Project("b", quota=8)]
    queue = [pending(i, project="b") for i in range(1, waiting + 1)]
    result: CycleResult = schedule(snapshot(nodes, queue, jobs, projects))
    by_id = {j.id: j for j in jobs}
    shrunk = {}
    for s in result.shrinks:
        job = by_id[s.job_id]
        assert 0 not in s.workers and not set(s.workers) & job.leaving
        shrunk.setdefault(s.job_id, set()).update(s.workers)
    for job_id, workers in shrunk.items():
        assert by_id[job_id].width - len(workers) >= by_id[job_id].spec.workers  # never below its minimum
    width_a = sum(j.width for j in jobs) - sum(len(w) for w in shrunk.values())
    taken = sum(len(w) for w in shrunk.values())
    assert taken == 0 or width_a >= quota_a  # reclaimed extras never take a below its quota
    if any(p.for_job in {q.id for q in queue} for p in result.preemptions):
        extras = sum(j.width - j.spec.workers for j in jobs if j.spec.elastic)
        beyond = sum(j.width for j in jobs) - quota_a
        assert taken == min(extras, max(beyond, 0))  # every extra it could take went first


def test_the_cycle_memory_holds_grown_workers_once() -> None:
    """The index after a grow holds the new workers; the next snapshot, which lists them, takes
    nothing twice (a fresh index agrees)."""
    job = elastic(5, "2:4", *on("n1", 2))
    memory = CycleMemory()
    nodes = [node("n1"), node("n2")]
    (grow,) = schedule(snapshot(nodes, [], [job]), memory=memory).grows
    grown = replace(job, placements=(*job.placements, *grow.placements))
    later = snapshot(nodes, [pending(1, gpus=4)], [grown])
    cluster, _, _ = memory.open(later)
    assert memory.rebuilds == 1
    assert cluster.total_free_gpus() == ClusterState(later).total_free_gpus() == 4


def test_a_project_whose_extras_fill_its_limit_starts_no_job_past_it_and_takes_them_back() -> None:
    projects = [Project("a", quota=2, limit=4)]
    job = elastic(5, "2:4", *on("n1", 4), project="a")
    nodes = [node("n1"), node("n2")]  # n2 idle: only the limit holds the waiting job back
    result = schedule(snapshot(nodes, [pending(1, gpus=2, project="a")], [job], projects))
    assert result.starts == ()  # 2 + 2 extras + 2 would be 6 of its 4
    assert [(s.job_id, s.workers, s.for_job) for s in result.shrinks] == [(5, (2, 3), 1)]
    assert result.shrinks[0].message == "shrank to 2 workers: GPUs for job 1 of project a, within its limit"
    assert result.pending[1].code is ReasonCode.PREEMPTING
    assert "within project a's limit" in result.pending[1].message
    assert result.grows == ()
    # While the shrunk workers leave they still count: it waits, and nothing more is shrunk.
    leaving = replace(job, leaving=frozenset({2, 3}))
    result = schedule(snapshot(nodes, [pending(1, gpus=2, project="a")], [leaving], projects))
    assert (result.starts, result.shrinks) == ((), ())
    assert "waiting for workers being stopped" in result.pending[1].message
    # Once they are gone it starts.
    shrunk = replace(job, placements=job.placements[:2])
    result = schedule(snapshot(nodes, [pending(1, gpus=2, project="a")], [shrunk], projects))
    assert [s.job_id for s in result.starts] == [1]


def test_extras_of_higher_standing_stay_and_the_job_waits_with_its_limit_reason() -> None:
    projects = [Project("a", quota=4, limit=4)]
    job = elastic(5, "2:4", *on("n1", 4), project="a", priority="interactive")
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, gpus=2, project="a")], [job], projects))
    assert (result.starts, result.shrinks, result.preemptions) == ((), (), ())
    assert result.pending[1].code is ReasonCode.LIMIT
    assert result.pending[1].message.startswith("limit: project a holds 4 of its limit 4 GPUs")


def test_a_unit_whose_projects_extras_fill_its_limit_gives_them_back_to_a_sibling() -> None:
    projects = [Project("u", limit=4), Project("a", parent="u"), Project("b", parent="u")]
    job = elastic(5, "2:4", *on("n1", 4), project="a")
    nodes = [node("n1"), node("n2")]
    result = schedule(snapshot(nodes, [pending(1, project="b")], [job], projects))
    assert result.starts == ()
    (shrink,) = result.shrinks
    assert (shrink.workers, shrink.message) == (
        (3,),
        "shrank to 3 workers: GPUs for job 1 of project b, within unit u's limit",
    )
    shrunk = replace(job, placements=job.placements[:3])
    assert [s.job_id for s in schedule(snapshot(nodes, [pending(1, project="b")], [shrunk], projects)).starts] == [1]


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 8),  # a's limit
    st.integers(1, 12),  # the unit's limit
    st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 2), st.integers(0, 3), st.booleans()), max_size=4),
    st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 3), st.booleans()), min_size=1, max_size=4),
)
def test_no_project_or_unit_holds_more_than_its_limit_after_a_cycle(
    limit_a: int, limit_u: int, shapes: list[tuple[str, int, int, bool]], queue: list[tuple[str, int, bool]]
) -> None:
    projects = [Project("u", limit=limit_u), Project("a", parent="u", limit=limit_a), Project("b", parent="u")]
    slots = [(f"n{i // 4}", i % 4) for i in range(32)]
    jobs: list[RunningJob] = []
    held = {"a": 0, "b": 0}
    for i, (name, least, extra, high) in enumerate(shapes):
        width = least + extra
        if held[name] + width > (limit_a if name == "a" else limit_u) or sum(held.values()) + width > limit_u:
            continue  # the cluster starts within its limits
        used = sum(held.values())
        priority = "interactive" if high else "train"
        jobs.append(
            elastic(10 + i, f"{least}:{width + 2}", *slots[used : used + width], project=name, priority=priority)
        )
        held[name] += width
    waiting = [pending(i + 1, gpus=g, project=name, priority="train") for i, (name, g, _) in enumerate(queue)]
    result = schedule(snapshot([node(f"n{i}") for i in range(8)], waiting, jobs, projects))
    after = dict(held)
    names = {j.id: j.spec.project for j in (*jobs, *waiting)}
    for s in result.shrinks:
        after[names[s.job_id]] -= len(s.workers)
    for g in result.grows:
        after[names[g.job_id]] += len(g.placements)
    for s in result.starts:
        after[names[s.job_id]] += sum(len(p.gpus) for p in s.placements)
    assert after["a"] <= limit_a
    assert after["a"] + after["b"] <= limit_u

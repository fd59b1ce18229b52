"""Invariants over random clusters and queues (hypothesis)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.projects import Project
from gpupool.domain.resources import GPU_FRACTION_STEPS, fraction_steps
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import SchedulerConfig, schedule
from tests.support.builders import T0, clusters, node, pending, running, snapshot


def _check_no_overallocation(nodes: list, starts: list, running: list[RunningJob]) -> None:  # type: ignore[type-arg]
    whole: dict[tuple[str, int], int] = defaultdict(int)
    shares: dict[tuple[str, int], int] = defaultdict(int)
    share_memory: dict[tuple[str, int], int] = defaultdict(int)
    cpus: dict[tuple[str, int], int] = defaultdict(int)
    shared_milli: dict[str, int] = defaultdict(int)
    memory: dict[str, int] = defaultdict(int)
    placements = [p for s in starts for p in s.placements] + [p for r in running for p in r.placements]
    for p in placements:
        for g in p.gpus:
            if p.gpu_share:
                shares[(p.node, g)] += fraction_steps(p.gpu_share)
                share_memory[(p.node, g)] += p.gpu_memory_mib
            else:
                whole[(p.node, g)] += 1
        if p.cpu_milli:  # a fraction: on the node's shared cores, counted in millicores
            shared_milli[p.node] += p.cpu_milli
        for c in () if p.cpu_milli else p.cpus:
            cpus[(p.node, c)] += 1
        memory[p.node] += p.memory_mib
    by_name = {n.name: n for n in nodes}
    for (name, g), count in whole.items():
        assert count == 1 and (name, g) not in shares, f"GPU {name}:{g} over-allocated"
        assert g < len(by_name[name].gpus)
    for key, total in shares.items():
        assert total <= GPU_FRACTION_STEPS, f"GPU {key} shared beyond 100%"
        node_name, index = key
        assert share_memory[key] <= by_name[node_name].gpus[index].memory_mib, f"GPU {key} memory over-allocated"
    assert all(count == 1 for count in cpus.values()), "a CPU core given twice"
    for name, one in by_name.items():
        pinned = sum(1 for n, _ in cpus if n == name)
        assert pinned * 1000 + shared_milli[name] <= one.cpus * 1000, f"{name}'s CPUs over-allocated"
    for name, used in memory.items():
        assert used <= by_name[name].memory_mib


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_never_over_allocates_and_gangs_are_whole(cluster: tuple[list, list[PendingJob]]) -> None:  # type: ignore[type-arg]
    nodes, jobs = cluster
    result = schedule(snapshot(nodes, jobs))
    by_id = {j.id: j for j in jobs}
    _check_no_overallocation(nodes, list(result.starts), [])
    for start in result.starts:
        job = by_id[start.job_id]
        assert sorted(p.worker for p in start.placements) == list(range(job.spec.workers)), "partial gang"
        for p in start.placements:
            expected = 1 if 0 < job.spec.gpus < 1 else int(job.spec.gpus)
            assert len(p.gpus) == expected
            if job.spec.cpu_milli % 1000:  # a fraction shares the node's unpinned cores
                assert p.cpu_milli == job.spec.cpu_milli and p.cpus
            else:
                assert len(p.cpus) * 1000 == job.spec.cpu_milli and p.cpu_milli == 0
    started = {s.job_id for s in result.starts}
    assert started.isdisjoint(result.pending)
    assert started | set(result.pending) == set(by_id), "every job either starts or has a reason"


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_a_second_cycle_over_the_first_cycles_result_never_over_allocates(cluster: tuple[list, list]) -> None:  # type: ignore[type-arg]
    nodes, jobs = cluster
    half = len(jobs) // 2
    first = schedule(snapshot(nodes, jobs[:half]))
    by_id = {j.id: j for j in jobs}
    held = [RunningJob(s.job_id, by_id[s.job_id].spec, s.placements, None) for s in first.starts]
    second = schedule(snapshot(nodes, jobs[half:], held))
    _check_no_overallocation(nodes, list(second.starts), held)


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_work_conserving_a_job_that_fits_alone_on_an_empty_cluster_is_not_left_waiting_for_nothing(
    cluster: tuple[list, list],  # type: ignore[type-arg]
) -> None:
    nodes, jobs = cluster
    result = schedule(snapshot(nodes, jobs))
    if not result.starts and jobs:
        # Nothing started: then no job can fit on the empty cluster on its own.
        for job in jobs:
            alone = schedule(snapshot(nodes, [job]))
            assert not alone.starts, f"job {job.id} fits alone but nothing started"


@st.composite
def contested(draw: st.DrawFn) -> tuple[list, list[PendingJob], list[RunningJob], list[Project]]:  # type: ignore[type-arg]
    """A cluster with projects, some of them borrowing, and a queue that wants GPUs back."""
    nodes, jobs = draw(clusters())
    names = ["a", "b", "c"]
    projects = [Project(n, quota=float(draw(st.integers(0, 8))), weight=float(draw(st.integers(1, 3)))) for n in names]
    jobs = [replace(j, spec=replace(j.spec, project=draw(st.sampled_from(names)))) for j in jobs]
    half = len(jobs) // 2
    first = schedule(snapshot(nodes, jobs[:half], projects=projects))
    by_id = {j.id: j for j in jobs}
    held = [
        RunningJob(
            s.job_id,
            by_id[s.job_id].spec,
            s.placements,
            T0 + timedelta(seconds=s.job_id),
            stopping=draw(st.booleans()) and draw(st.booleans()),
        )
        for s in first.starts
    ]
    return nodes, jobs[half:], held, projects


@settings(max_examples=600, deadline=None)
@given(contested())
def test_preemption_only_stops_train_jobs_and_never_takes_a_lender_below_quota(
    case: tuple[list, list[PendingJob], list[RunningJob], list[Project]],  # type: ignore[type-arg]
) -> None:
    nodes, queue, held, projects = case
    result = schedule(snapshot(nodes, queue, held, projects))
    running = {r.id: r for r in held}
    waiting = {j.id: j for j in queue}
    quotas = {p.name: p.quota for p in projects}
    allocated: dict[str, float] = defaultdict(float)
    for r in held:
        allocated[r.spec.project] += r.spec.total_gpus
    for start in result.starts:  # what the cycle starts counts too: the lender holds it afterwards
        allocated[waiting[start.job_id].spec.project] += waiting[start.job_id].spec.total_gpus
    taken: dict[str, float] = defaultdict(float)
    assert len({p.job_id for p in result.preemptions}) == len(result.preemptions), "a job preempted twice"
    for p in result.preemptions:
        victim, beneficiary = running[p.job_id], waiting[p.for_job]
        assert not victim.spec.quota_bound, "an interactive or inference job was preempted"
        assert not victim.stopping, "a job already stopping was chosen again"
        assert p.for_job not in {s.job_id for s in result.starts}
        if victim.spec.project != beneficiary.spec.project:
            taken[victim.spec.project] += victim.spec.total_gpus
        else:
            assert victim.spec.priority.rank < beneficiary.spec.priority.rank
    for project, gpus in taken.items():
        assert allocated[project] - gpus >= quotas[project] - 1e-9, f"reclaim took {project} below its quota"
    _check_no_overallocation(nodes, list(result.starts), held)


@st.composite
def borrowed(draw: st.DrawFn) -> tuple[list, list[PendingJob], list[RunningJob], list[Project]]:  # type: ignore[type-arg]
    """Project a fills 1-3 nodes of 4 GPUs with 1- and 2-GPU jobs started over the last minute,
    borrowing some of b's quota; b's jobs wait (reclaim's case, drawn so that it happens)."""
    nodes = [node(f"n{i}") for i in range(draw(st.integers(1, 3)))]
    held: list[RunningJob] = []
    for n in nodes:
        gpu = 0
        while gpu < 4:
            size = min(4 - gpu, draw(st.sampled_from([1, 2])))
            job = running(len(held) + 100, (n.name, tuple(range(gpu, gpu + size))), project="a")
            held.append(replace(job, started_at=T0 - timedelta(seconds=draw(st.integers(0, 60)))))
            gpu += size
    capacity = 4 * len(nodes)
    a_quota = draw(st.integers(0, capacity - 1))
    projects = [Project("a", quota=float(a_quota)), Project("b", quota=float(capacity - a_quota))]
    queue = [pending(i, project="b", gpus=draw(st.sampled_from([1, 2]))) for i in range(1, draw(st.integers(1, 4)) + 1)]
    return nodes, queue, held, projects


@settings(max_examples=200, deadline=None)
@given(st.one_of(borrowed(), contested()), st.sampled_from([5.0, 60.0, 90.0]))
def test_with_a_minimum_run_reclaim_stops_no_younger_job_and_wakes_when_one_comes_of_age(
    case: tuple[list, list[PendingJob], list[RunningJob], list[Project]],  # type: ignore[type-arg]
    min_run_s: float,
) -> None:
    nodes, queue, held, projects = case
    now = T0 + timedelta(seconds=30)  # contested's jobs started at T0 + their id, borrowed's before T0
    result = schedule(
        replace(snapshot(nodes, queue, held, projects), now=now), SchedulerConfig(reclaim_min_run_s=min_run_s)
    )
    running_ = {r.id: r for r in held}
    for p in result.preemptions:
        victim = running_[p.job_id]
        if "borrowed beyond its quota" in p.message:  # reclaimed (not displaced, not preempted in-project)
            assert victim.started_at is not None
            assert (now - victim.started_at).total_seconds() >= min_run_s, f"job {victim.id} reclaimed too young"
    if result.wake_at is not None:
        comes_of_age = {r.started_at + timedelta(seconds=min_run_s) for r in held if r.started_at is not None}
        assert now < result.wake_at and result.wake_at in comes_of_age, "a wake that is not a job's coming of age"
        told = [
            r
            for r in result.pending.values()
            if r.code is ReasonCode.RECLAIM and "taken back once they have run" in r.message
        ]
        assert told, "a wake with no job told it waits for it"
    _check_no_overallocation(nodes, list(result.starts), held)


def _reclaimable(held: list[RunningJob], quotas: dict[str, float], exclude: str) -> set[int]:
    """Running train jobs that projects hold beyond their quotas (youngest first, lenders kept at
    their quota): the GPUs a project below its quota may take back."""
    allocated: dict[str, float] = defaultdict(float)
    for r in held:
        allocated[r.spec.project] += r.spec.total_gpus
    out: set[int] = set()
    for r in sorted(held, key=lambda r: r.started_at or T0, reverse=True):
        p = r.spec.project
        if p == exclude or r.stopping or r.spec.quota_bound:
            continue
        if allocated[p] - r.spec.total_gpus >= quotas.get(p, 0.0) - 1e-9:
            allocated[p] -= r.spec.total_gpus
            out.add(r.id)
    return out


@settings(max_examples=400, deadline=None)
@given(contested())
def test_a_project_within_quota_is_not_left_waiting_while_others_borrow_what_it_could_use(
    case: tuple[list, list[PendingJob], list[RunningJob], list[Project]],  # type: ignore[type-arg]
) -> None:
    nodes, queue, held, projects = case
    result = schedule(snapshot(nodes, queue, held, projects))
    if result.starts or result.preemptions:
        return  # the cycle acted
    quotas = {p.name: p.quota for p in projects}
    for job in queue:
        p = job.spec.project
        mine = sum(r.spec.total_gpus for r in held if r.spec.project == p)
        if job.spec.gpus < 1 or mine + job.spec.total_gpus > quotas.get(p, 0.0):
            continue
        if schedule(snapshot(nodes, [job], held)).starts:
            continue  # it fits in what is free now: it waits behind a job ahead of it, not for a borrower
        freed = _reclaimable(held, quotas, exclude=p) | {r.id for r in held if r.stopping}
        alone = snapshot(nodes, [job], [r for r in held if r.id not in freed])
        if schedule(alone).starts:
            # The GPUs it could use may be promised to a job ahead of it (both cannot have them),
            # but the cycle must be taking them back for someone, not sitting idle.
            acting = [r for r in result.pending.values() if r.code in (ReasonCode.RECLAIM, ReasonCode.PREEMPTING)]
            assert acting, f"job {job.id} of {p} (within quota) could run on reclaimable GPUs, nothing is done: " + str(
                result.pending[job.id]
            )

"""Properties of the tree of projects (issue 34, "Tests"): over random two-level trees, one cycle
takes no level (project or unit) beyond its limit, and a level below its quota whose job waits
gets its GPUs back: the job starts, or reclaim stops enough of the borrowers' jobs that ran the
minimum (``--reclaim-min-run``), all of them from levels beyond their quota.

The cluster is one node of 16 GPUs, so a job waits for GPUs, not for them to lie on one node;
every running job holds one GPU (``running`` jobs of the builders), so stopping jobs frees
exactly the GPUs counted. The second property found two scheduler bugs, fixed, whose examples are
kept as tests: a job's own reservation kept its idle GPUs from reclaim, and a unit at its limit
(a sibling borrowed its quota) held back its project's job before reclaim looked."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import SchedulerConfig, schedule
from tests.support.builders import T0, node, pending, running, snapshot

GPUS = 16
NODES = [node("n1", GPUS)]
UNITS = {"u1": ("a1", "a2"), "u2": ("b1", "b2")}
LEAVES = [leaf for leaves in UNITS.values() for leaf in leaves] + ["default"]
MIN_RUN_S = 300.0


@dataclass(frozen=True)
class Tree:
    projects: dict[str, Project]
    held: dict[str, int]  # GPUs each leaf holds, in 1-GPU running jobs that ran long ago
    wanted: list[tuple[str, int]]  # pending jobs: (leaf, GPUs), in submission order

    def running_jobs(self) -> list[RunningJob]:
        jobs, slot = [], 0
        for owner in LEAVES:
            for _ in range(self.held.get(owner, 0)):
                r = running(100 + slot, ("n1", (slot,)), project=owner)
                jobs.append(replace(r, started_at=T0 - timedelta(days=1)))
                slot += 1
        return jobs

    def pending_jobs(self) -> list[PendingJob]:
        return [pending(i, project=p, gpus=n) for i, (p, n) in enumerate(self.wanted, start=1)]

    def level_of(self, counts: dict[str, float], name: str) -> float:
        """What a leaf holds in ``counts``, or a unit's leaves together."""
        return sum(counts.get(leaf, 0.0) for leaf in UNITS.get(name, (name,)))

    def levels(self) -> list[str]:
        return [*UNITS, *LEAVES]


def _limit(draw: st.DrawFn, quota: int) -> int | None:
    return draw(st.none() | st.integers(quota, quota + 6))


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    """Two units under the root, two leaves each (quotas within the unit's), and ``default`` with
    what the units leave; running jobs within every limit and the cluster, random pending jobs."""
    projects: dict[str, Project] = {}
    left = GPUS
    for unit, leaves in UNITS.items():
        quota = draw(st.integers(0, min(8, left)))
        left -= quota
        projects[unit] = Project(unit, quota=quota, limit=_limit(draw, quota))
        share = quota
        for leaf in leaves:
            q = draw(st.integers(0, share))
            share -= q
            projects[leaf] = Project(leaf, quota=q, limit=_limit(draw, q), parent=unit)
    projects["default"] = Project("default", quota=left)
    held: dict[str, int] = {}
    room = GPUS
    unit_room = {u: projects[u].limit if projects[u].limit is not None else GPUS for u in UNITS}
    for leaf in LEAVES:
        cap = projects[leaf].limit
        unit = projects[leaf].parent
        n = min(draw(st.integers(0, 7)), room, GPUS if cap is None else int(cap))
        if unit is not None:
            n = min(n, int(unit_room[unit]))
            unit_room[unit] -= n
        held[leaf] = n
        room -= n
    wanted = draw(st.lists(st.tuples(st.sampled_from(LEAVES), st.sampled_from([1, 2, 4])), max_size=10))
    return Tree(projects, held, wanted)


def _cycle(tree: Tree, pending_jobs: list[PendingJob] | None = None):  # type: ignore[no-untyped-def]
    jobs = tree.pending_jobs() if pending_jobs is None else pending_jobs
    snap = snapshot(NODES, jobs, tree.running_jobs(), list(tree.projects.values()))
    return schedule(snap, SchedulerConfig(reclaim_min_run_s=MIN_RUN_S))


@settings(max_examples=60, deadline=None)
@given(trees())
def test_no_level_is_taken_beyond_its_limit(tree: Tree) -> None:
    result = _cycle(tree)
    by_id = {j.id: j for j in tree.pending_jobs()}
    after: dict[str, float] = {leaf: float(n) for leaf, n in tree.held.items()}
    for start in result.starts:
        job = by_id[start.job_id]
        after[job.spec.project] = after.get(job.spec.project, 0.0) + job.spec.total_gpus
    for name in tree.levels():
        limit = tree.projects[name].limit
        if limit is not None:
            assert tree.level_of(after, name) <= limit + 1e-9, f"{name} beyond its limit {limit:g}"
    assert sum(after.values()) <= GPUS + 1e-9


@st.composite
def claims(draw: st.DrawFn) -> tuple[Tree, str, int]:
    """A cluster with some GPUs idle or none, and a leaf below its quota with a job of ``need``
    GPUs that fits within it."""
    tree = draw(trees())
    below = [leaf for leaf in LEAVES if tree.projects[leaf].quota - tree.held[leaf] >= 1]
    assume(below)
    leaf = draw(st.sampled_from(below))
    need = draw(st.integers(1, int(tree.projects[leaf].quota) - tree.held[leaf]))
    # The idle GPUs go to a project with no limit above it other than the claimant.
    free = [
        other
        for other in LEAVES
        if other != leaf
        and tree.projects[other].limit is None
        and (tree.projects[other].parent is None or tree.projects[tree.projects[other].parent].limit is None)
    ]
    assume(free)
    filler = draw(st.sampled_from(free))
    held = dict(tree.held)
    held[filler] += draw(st.integers(0, GPUS - sum(held.values())))  # the idle GPUs left: any number
    return replace(tree, held=held), leaf, need


@settings(max_examples=60, deadline=None)
@given(claims())
def test_a_level_below_its_quota_gets_its_gpus_back(claim: tuple[Tree, str, int]) -> None:
    tree, leaf, need = claim
    # Its job first in the queue, then the others (the claimant's own included).
    jobs = [pending(1, project=leaf, gpus=need), *(replace(j, id=j.id + 1) for j in tree.pending_jobs())]
    result = _cycle(tree, jobs)
    if 1 in {s.job_id for s in result.starts}:
        return
    by_id = {r.id: r for r in tree.running_jobs()}
    before = {name: float(n) for name, n in tree.held.items()}
    pending_by_id = {j.id: j for j in jobs}
    # Beyond its quota once this cycle's starts hold their GPUs (a job of the lender may start first).
    after = dict(before)
    for s in result.starts:
        spec = pending_by_id[s.job_id].spec
        after[spec.project] = after.get(spec.project, 0.0) + spec.total_gpus
    victims = [by_id[p.job_id] for p in result.preemptions if p.job_id in by_id]
    for victim in victims:
        owner = victim.spec.project
        beyond = [
            name
            for name in (owner, tree.projects[owner].parent)
            if name is not None and tree.level_of(after, name) > tree.projects[name].quota + 1e-9
        ]
        assert beyond, f"job {victim.id} of {owner} was stopped though no level of it is beyond its quota"
    started = sum(pending_by_id[s.job_id].spec.total_gpus for s in result.starts)
    idle = GPUS - sum(before.values()) - started
    freed = sum(v.spec.total_gpus for v in victims)
    # A job a unit's limit holds back blocks no queue: a smaller one of its project may take the
    # unit's room first, and where the job is then beyond its quota it borrows, and is owed nothing.
    mine = after.get(leaf, 0.0) - before.get(leaf, 0.0)
    if mine and after.get(leaf, 0.0) + need > tree.projects[leaf].quota + 1e-9:
        return
    assert idle + freed >= need - 1e-9, (
        f"{leaf}'s job of {need} waits ({result.pending.get(1)}): {idle:g} idle, {freed:g} freed"
    )


def _owed(projects: list[Project], held: dict[str, int], claimant: str, need: int) -> tuple[tuple, tuple]:  # type: ignore[type-arg]
    tree = Tree({p.name: p for p in projects}, {leaf: held.get(leaf, 0) for leaf in LEAVES}, [])
    result = _cycle(tree, [pending(1, project=claimant, gpus=need)])
    return result.starts, result.preemptions


FLAT = [Project("u1", quota=0), Project("a1", quota=0, parent="u1"), Project("default", quota=16)]


def test_a_job_whose_reservation_holds_the_idle_gpus_reclaims_the_rest() -> None:
    """Found by the property above: reclaim counted the GPUs the job's own reservation keeps as
    taken (displace released them first), so a job owed 16 with 15 idle reserved for it found no
    room in stopping the borrower's one job. Both now count them as the job's own."""
    # a1 borrows 1 GPU beyond its quota 0; default's job wants its whole quota of 16.
    starts, preemptions = _owed(FLAT, {"a1": 1}, "default", 16)
    assert not starts and [p.job_id for p in preemptions] == [100]


def test_a_project_whose_unit_is_at_its_limit_takes_back_from_its_sibling() -> None:
    """Found by the property above: a job within its quota that its unit's limit held back was
    refused by policy, so reclaim never took back from the sibling that borrowed the unit's quota."""
    tree = [
        Project("u2", quota=1, limit=1),
        Project("b1", quota=0, parent="u2"),
        Project("b2", quota=1, parent="u2"),
        Project("default", quota=15),
    ]
    # b1 borrows b2's quota (u2 at its limit), default fills the rest; b2's job waits.
    starts, preemptions = _owed(tree, {"b1": 1, "default": 15}, "b2", 1)
    assert not starts and [p.job_id for p in preemptions] == [100]


def test_a_project_takes_back_inside_its_unit_and_its_unit_outside() -> None:
    """Found by the property above: the claim was made at one level only. b1 is owed its 4, u2
    only 3 (b2 borrows 1 inside it): the one level owed the whole job was b1, whose sibling holds
    1, so b1 waited. Now b1 takes back b2's one and u2 one of a2's (2 GPUs are idle)."""
    tree = [
        Project("u1", quota=0),
        Project("a2", quota=0, parent="u1"),
        Project("u2", quota=4),
        Project("b1", quota=4, parent="u2"),
        Project("b2", quota=0, parent="u2"),
        Project("default", quota=12),
    ]
    starts, preemptions = _owed(tree, {"a2": 6, "b2": 1, "default": 7}, "b1", 4)
    assert not starts and sorted(p.job_id for p in preemptions) == [105, 106]


def test_a_project_whose_unit_is_at_its_limit_also_takes_back_outside_it() -> None:
    """Found by the property above: where a unit's limit held the job back, the claim stayed
    inside the unit. a1 is owed 6, u1 (at its limit of 6 with a2's one GPU) 5; 4 GPUs are idle:
    a2's one brings u1 under its limit, and default, beyond its quota by 1, gives the last."""
    tree = [
        Project("u1", quota=6, limit=6),
        Project("a1", quota=6, parent="u1"),
        Project("a2", quota=0, parent="u1"),
        Project("default", quota=10),
    ]
    starts, preemptions = _owed(tree, {"a2": 1, "default": 11}, "a1", 6)
    assert not starts and sorted(p.job_id for p in preemptions) == [100, 111]

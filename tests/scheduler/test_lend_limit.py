"""Capacity never lent (issue 34 item 3): a project's or unit's ``--lend-limit`` caps what others
borrow of its unused quota; the rest stays idle for it, and reclaim returns what was lent."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.errors import InvalidInput
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import RunningJob
from gpupool.scheduler import SchedulerConfig, schedule
from tests.support.builders import T0, node, pending, running, snapshot

NODES = [node("n1", 8), node("n2", 8)]  # 16 GPUs


def _held(held: dict[str, int], max_runtime_s: int | None = None) -> list[RunningJob]:
    """1-GPU running jobs filling n1 then n2, ids 100 up, in the order given."""
    jobs, slot = [], 0
    for owner, n in held.items():
        for _ in range(n):
            at = (f"n{1 + slot // 8}", (slot % 8,))
            jobs.append(running(100 + slot, at, project=owner, max_runtime_s=max_runtime_s))
            slot += 1
    return jobs


def _started(projects: list[Project], jobs: int, held: dict[str, int] | None = None, project: str = "nlp") -> list[int]:
    result = schedule(
        snapshot(NODES, [pending(i, project=project) for i in range(1, jobs + 1)], _held(held or {}), projects)
    )
    return sorted(s.job_id for s in result.starts)


@pytest.mark.parametrize(
    ("lend_limit", "held", "started"),
    [
        # nlp's 4 and default's 4 (which lends all) always; then what vision lends.
        (None, {}, 16),  # lends all, as before: nlp takes vision's 8 idle GPUs too
        (8, {}, 16),  # a lend limit of the whole quota is the same
        (1, {}, 9),  # vision lends 1 of its 8 idle GPUs: 7 stay idle for it
        (0, {}, 8),  # nothing lent
        (1, {"vision": 6}, 9),  # vision uses 6: of its 2 unused, 1 is lent and 1 kept
        (0, {"vision": 8}, 8),  # vision uses all its quota: nothing is kept
    ],
)
def test_a_lend_limit_caps_what_others_borrow_of_the_unused_quota(
    lend_limit: float | None, held: dict[str, int], started: int
) -> None:
    projects = [Project("vision", quota=8, lend_limit=lend_limit), Project("nlp", quota=4), Project("default", quota=4)]
    assert len(_started(projects, 16, held)) == min(started, 16 - sum(held.values()))


def test_the_waiting_job_names_the_project_its_idle_gpus_are_kept_for() -> None:
    projects = [Project("vision", quota=8, lend_limit=1), Project("nlp", quota=4), Project("default", quota=4)]
    result = schedule(snapshot(NODES, [pending(i, project="nlp") for i in range(1, 12)], [], projects))
    assert len(result.starts) == 9
    why = result.pending[10]
    assert why.code is ReasonCode.QUOTA
    assert why.message == (
        "quota: 7 idle GPUs are kept for project vision (--lend-limit 1); project nlp is beyond its quota"
        " and its job needs 1 of the 7 idle"
    )


def test_the_lender_itself_uses_its_kept_gpus_and_may_borrow_beyond_them() -> None:
    projects = [Project("vision", quota=8, lend_limit=0), Project("nlp", quota=4), Project("default", quota=4)]
    assert len(_started(projects, 16, project="vision")) == 16


def test_a_units_lend_limit_keeps_its_quota_for_its_projects_but_they_lend_to_each_other() -> None:
    tree = [
        Project("cs", quota=8, lend_limit=2),
        Project("vision", quota=4, parent="cs"),
        Project("nlp", quota=4, parent="cs"),
        Project("bio", quota=8),
    ]
    # bio borrows 2 of cs's 8 unused GPUs, no more.
    result = schedule(snapshot(NODES, [pending(i, project="bio") for i in range(1, 13)], [], tree))
    assert len(result.starts) == 10
    assert result.pending[11].message.startswith("quota: 6 idle GPUs are kept for unit cs (--lend-limit 2);")
    # Within cs, nlp borrows all of vision's unused quota (and 2 of bio's beyond, which bio lends).
    assert len(_started(tree, 16, project="nlp")) == 16


def test_a_childs_lend_limit_holds_inside_its_unit_and_the_larger_keeps_count() -> None:
    tree = [
        Project("cs", quota=8, lend_limit=6),
        Project("vision", quota=6, lend_limit=1, parent="cs"),
        Project("nlp", quota=2, parent="cs"),
        Project("bio", quota=8),
    ]
    # nlp, vision's sibling, borrows 1 of vision's 6: vision keeps 5.
    assert len(_started(tree, 16, project="nlp")) == 16 - 5
    # bio: cs keeps 8 - 6 = 2 itself, but vision keeps 5 of it: 5 stay idle.
    result = schedule(snapshot(NODES, [pending(i, project="bio") for i in range(1, 13)], [], tree))
    assert len(result.starts) == 11
    assert "5 idle GPUs are kept for project vision (--lend-limit 1)" in result.pending[12].message


def test_backfill_starts_no_job_into_kept_gpus() -> None:
    """Behind a reservation, backfill starts jobs the quota check passed before others started."""
    projects = [Project("vision", quota=8, lend_limit=2), Project("nlp", quota=8)]
    # nlp holds its quota, half of each node: vision's 8-GPU job waits for a whole node, reserved;
    # nlp's 1-GPU jobs fit the other node's 4 free GPUs, but vision lends only 2 of its 8.
    held = [running(100 + i, (f"n{1 + i // 4}", (i % 4,)), project="nlp", max_runtime_s=3600) for i in range(8)]
    jobs = [pending(1, project="vision", gpus=8), *(pending(i, project="nlp") for i in range(2, 9))]
    result = schedule(snapshot(NODES, jobs, held, projects))
    assert sorted(s.job_id for s in result.starts) == [2, 3]
    assert result.pending[5].message.startswith("quota: 6 idle GPUs are kept for project vision")


def test_reclaim_returns_what_was_lent_within_the_minimum_run() -> None:
    projects = [Project("vision", quota=8, lend_limit=2), Project("nlp", quota=8)]
    # nlp borrowed vision's 2 lendable GPUs (and 6 it held within quota) two minutes ago...
    borrowed = [replace(r, started_at=T0 - timedelta(seconds=120)) for r in _held({"nlp": 10})]
    # ... vision's 8-GPU job waits: 6 are idle, it reclaims the 2 once they have run 5 minutes.
    config = SchedulerConfig(reclaim_min_run_s=300)
    result = schedule(snapshot(NODES, [pending(1, project="vision", gpus=8)], borrowed, projects), config)
    assert not result.preemptions
    assert result.pending[1].code is ReasonCode.RECLAIM and "the first in 3m" in result.pending[1].message
    later = replace(
        snapshot(NODES, [pending(1, project="vision", gpus=8)], borrowed, projects), now=T0 + timedelta(seconds=200)
    )
    assert len(schedule(later, config).preemptions) == 2


def test_bad_lend_limits_are_refused_naming_the_numbers() -> None:
    with pytest.raises(InvalidInput, match="lend limit 9 is above quota 8"):
        Project.create("vision", quota=8, lend_limit=9)
    with pytest.raises(InvalidInput, match="lend limit must be a number from 0"):
        Project.create("vision", quota=8, lend_limit=-1)
    assert Project.create("vision", quota=8, lend_limit=0).lend_limit == 0.0


@st.composite
def _lending_clusters(draw: st.DrawFn) -> tuple[list[Project], dict[str, int], list[tuple[str, int, int | None]]]:
    names = ["a", "b", "c"]
    quotas = [draw(st.integers(0, 6)) for _ in names]
    projects = []
    for name, quota in zip(names, quotas, strict=True):
        lend = draw(st.none() | st.integers(0, quota))
        projects.append(Project(name, quota=quota, lend_limit=lend))
    projects.append(Project("default", quota=max(0, 16 - sum(quotas))))
    held = {name: draw(st.integers(0, 5)) for name in names}
    # Short --max-runtime jobs and running jobs that end backfill behind a reservation.
    shape = st.tuples(st.sampled_from(names), st.sampled_from([1, 2, 4, 8]), st.sampled_from([None, 60]))
    jobs = draw(st.lists(shape, max_size=12))
    return projects, held, jobs


def _kept(projects: list[Project], held: dict[str, float], outside: str) -> float:
    """The reference rule, flat: what every lender but ``outside`` keeps idle."""
    return sum(
        max(0.0, p.quota - held.get(p.name, 0.0) - p.lend_limit)
        for p in projects
        if p.lend_limit is not None and p.name != outside
    )


@settings(max_examples=200, deadline=None)
@given(_lending_clusters(), st.sampled_from(["default", "greedy", "fifo-share"]))
def test_never_lent_capacity_is_never_lent(
    cluster: tuple[list[Project], dict[str, int], list[tuple[str, int, int | None]]], policy: str
) -> None:
    from gpupool.scheduler.policies import preset

    projects, held, wanted = cluster
    running_jobs = _held(held, max_runtime_s=3600)
    jobs = [pending(i, project=p, gpus=n, max_runtime_s=t) for i, (p, n, t) in enumerate(wanted, start=1)]
    result = schedule(snapshot(NODES, jobs, running_jobs, projects), preset(policy))
    by_id = {j.id: j for j in jobs}
    quota = {p.name: p.quota for p in projects}
    now = {name: float(n) for name, n in held.items()}
    for start in result.starts:  # replayed in the order decided
        job = by_id[start.job_id]
        name, need = job.spec.project, job.spec.total_gpus
        if now.get(name, 0.0) + need > quota[name] + 1e-9:  # it borrows
            idle = 16 - sum(now.values())
            assert idle - need >= _kept(projects, now, name) - 1e-9, f"job {job.id} took GPUs kept idle"
        now[name] = now.get(name, 0.0) + need

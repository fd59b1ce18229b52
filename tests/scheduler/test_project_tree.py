"""The tree of projects in the scheduler (issue 34): a unit's limit holds back every job below
it and ``why`` names the unit; what a project leaves idle is lent to its siblings, then up the
tree; a flat list decides as before."""

from __future__ import annotations

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.projects import Project
from gpupool.scheduler import schedule
from tests.support.builders import node, pending, running, snapshot

TREE = [
    Project("cs", quota=4, limit=5),
    Project("vision", quota=2, parent="cs"),
    Project("nlp", quota=2, parent="cs"),
    Project("lab3", quota=1, parent="vision"),
    Project("bio", quota=4),
    Project("genome", quota=2, parent="bio"),
    Project("protein", quota=2, parent="bio"),
]


def _run(pending_jobs: list, running_jobs: list | None = None, projects: list[Project] = TREE):  # type: ignore[no-untyped-def,type-arg]
    return schedule(snapshot([node("n1", 8), node("n2", 8)], pending_jobs, running_jobs, projects))


@pytest.mark.parametrize(
    ("held", "project", "started", "why"),
    [
        # nlp holds 3 of cs's limit 5: two more start, the third waits naming the unit.
        (
            {"nlp": 3},
            "nlp",
            [1, 2],
            "limit: unit cs is at its limit of 5 GPUs (its projects hold 5; project nlp's job needs 1 more)",
        ),
        # A grandchild: vision's own limit is none, cs's holds it back two levels up.
        (
            {"nlp": 4},
            "lab3",
            [1],
            "limit: unit cs is at its limit of 5 GPUs (its projects hold 5; project lab3's job needs 1 more)",
        ),
        # bio has no limit: its projects borrow the whole idle cluster.
        ({"genome": 3}, "protein", [1, 2, 3], None),
    ],
)
def test_a_units_limit_holds_back_every_project_below_it(
    held: dict[str, int], project: str, started: list[int], why: str | None
) -> None:
    running_jobs = []
    gpu = 0
    for owner, n in held.items():
        for _ in range(n):
            running_jobs.append(running(100 + gpu, ("n1", (gpu,)), project=owner))
            gpu += 1
    result = _run([pending(i, project=project) for i in (1, 2, 3)], running_jobs)
    assert sorted(s.job_id for s in result.starts) == started
    if why is not None:
        assert result.pending[3].code is ReasonCode.LIMIT and result.pending[3].message == why


def test_what_a_project_leaves_idle_is_lent_to_its_siblings_then_up_the_tree() -> None:
    tree = [p if p.name != "cs" else Project("cs", quota=4) for p in TREE]  # no limit on cs here
    # vision and the whole of bio are idle: nlp borrows vision's quota, then bio's.
    result = _run([pending(i, project="nlp") for i in range(1, 9)], projects=tree)
    assert len(result.starts) == 8 and not result.pending


def test_a_flat_list_decides_as_before_a_unit_with_no_children() -> None:
    flat = [Project("cs", quota=4, limit=5), Project("bio", quota=4)]
    jobs = [pending(i, project="cs") for i in range(1, 8)]
    result = _run(jobs, projects=flat)
    assert len(result.starts) == 5
    assert result.pending[6].message == "limit: project cs holds 5 of its limit 5 GPUs; this job needs 1 more"


def _full(held: dict[str, int]) -> list:  # type: ignore[type-arg]
    """1-GPU running jobs filling n1 then n2, ids 100 up, in the order given."""
    jobs, slot = [], 0
    for owner, n in held.items():
        for _ in range(n):
            jobs.append(running(100 + slot, (f"n{1 + slot // 8}", (slot % 8,)), project=owner))
            slot += 1
    return jobs


@pytest.mark.parametrize(
    ("held", "lender"),
    [
        # cs is at its quota (nlp uses vision's part): vision takes back from its sibling, not from
        # genome, though genome holds beyond its own quota too (inside bio's).
        ({"nlp": 4, "genome": 4, "default": 8}, "nlp"),
        # cs is below its quota and bio beyond its: the GPUs go back up a level, from bio's project.
        ({"nlp": 1, "genome": 7, "default": 8}, "genome"),
    ],
)
def test_reclaim_returns_gpus_to_the_level_that_lent_them(held: dict[str, int], lender: str) -> None:
    tree = [p if p.name != "cs" else Project("cs", quota=4) for p in TREE]
    result = _run([pending(1, project="vision")], _full(held), projects=tree)
    assert result.preemptions, result.pending
    victims = {p.job_id for p in result.preemptions}
    assert {r.spec.project for r in _full(held) if r.id in victims} == {lender}
    assert result.pending[1].code is ReasonCode.RECLAIM


def test_a_lender_is_never_taken_below_a_levels_quota() -> None:
    # cs is below its quota; bio holds exactly its quota (genome borrows protein's part inside
    # bio), so only default, beyond its quota, gives GPUs back to cs's level.
    tree = [p if p.name != "cs" else Project("cs", quota=4) for p in TREE]
    held = {"nlp": 1, "genome": 3, "protein": 1, "default": 11}
    result = _run([pending(1, project="vision"), pending(2, project="vision")], _full(held), projects=tree)
    victims = {p.job_id for p in result.preemptions}
    assert len(victims) == 2 and {r.spec.project for r in _full(held) if r.id in victims} == {"default"}


def test_a_project_whose_unit_is_at_its_limit_takes_back_from_its_sibling_though_gpus_are_idle() -> None:
    # nlp borrowed vision's part of cs up to cs's limit of 5; 11 GPUs lie idle, but only nlp's
    # GPUs bring cs under its limit: vision's job of 2 stops two of them (not more), and says why.
    result = _run([pending(1, project="vision", gpus=2)], _full({"nlp": 5}))
    victims = sorted(p.job_id for p in result.preemptions)
    assert len(victims) == 2 and set(victims) <= {100, 101, 102, 103, 104}
    assert not result.starts
    assert result.pending[1].message == (
        "reclaim: stopping 2 job(s) of nlp that borrowed beyond quota (unit cs is at its limit); "
        "starts when their GPUs are free"
    )


UNITS_8 = [
    Project("u1", quota=8),
    Project("a1", quota=8, parent="u1"),
    Project("a2", quota=0, parent="u1"),
    Project("u2", quota=8),
    Project("b1", quota=8, parent="u2"),
    Project("b2", quota=0, parent="u2"),
]


def test_a_claim_is_made_at_every_level_on_the_path_that_is_owed() -> None:
    # b1 is owed 2 of its quota, its unit u2 only 1 (b2 borrows 1 inside it): b1 takes b2's one
    # back, and u2 the other from a2, which borrows beyond u1's quota (never 2 from a2: u2 would
    # then hold 9 of its 8).
    held = {"a2": 9, "b1": 6, "b2": 1}
    result = _run([pending(1, project="b1", gpus=2)], _full(held), projects=UNITS_8)
    victims = {p.job_id for p in result.preemptions}
    owners = sorted(r.spec.project for r in _full(held) if r.id in victims)
    assert owners == ["a2", "b2"], result.pending
    assert not result.starts and result.pending[1].code is ReasonCode.RECLAIM


def test_a_level_takes_from_outside_only_what_it_is_owed() -> None:
    # As above but b2's job is an inference job (never taken back): u2 is owed 1, b1 needs 2, so
    # b1 waits and nothing is stopped for it.
    held = {"a2": 9, "b1": 6}
    jobs = _full(held)
    b2 = running(200, ("n2", (7,)), project="b2", priority="inference")
    result = _run([pending(1, project="b1", gpus=2)], [*jobs, b2], projects=UNITS_8)
    assert not result.preemptions and not result.starts

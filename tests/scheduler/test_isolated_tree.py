"""The isolated policy with a tree of projects and per-model quotas (issue 34): only leaf
projects are confined (a unit takes no nodes of its own, and its limit still holds), and a
project's per-model quotas confine it as its total quota does, its per-model limits holding as
under every policy."""

from __future__ import annotations

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.projects import Project
from gpupool.scheduler import schedule
from gpupool.scheduler.partition import assign, confined, model_caps
from gpupool.scheduler.policies import preset
from tests.support.builders import node, pending, running, snapshot

NODES = [node("n0", 8), node("n1", 8), node("n2", 4)]
FLEET = [node("a1", 4, model="A100"), node("h1", 4, model="H100")]
BY_NODES, BY_GPUS = preset("fifo-isolated"), preset("fifo-isolated", partition="gpus")


def test_a_unit_takes_no_nodes_of_its_own_its_projects_do() -> None:
    tree = [
        Project("cs", quota=12),
        Project("vision", quota=8, parent="cs"),
        Project("nlp", quota=4, parent="cs"),
        Project("bio", quota=4),
    ]
    sets = {k: set(v) for k, v in assign(NODES, tree).items()}
    # Flat, cs (12) would take n0+n1 and leave vision and nlp one node for three quotas.
    assert sets == {"vision": {"n0"}, "nlp": {"n2"}, "bio": {"n1"}, "default": set()}


def test_a_units_limit_holds_back_its_projects_on_their_own_nodes() -> None:
    # vision and nlp own a whole 8-GPU node each (quotas rounded up to nodes); cs's limit of 5 holds.
    tree = [
        Project("cs", quota=4, limit=5),
        Project("vision", quota=2, parent="cs"),
        Project("nlp", quota=2, parent="cs"),
    ]
    held = [running(100 + i, ("n0", (i,)), project="nlp") for i in range(2)]  # ties by name: nlp owns n0
    jobs = [pending(i, project="vision") for i in range(1, 6)]
    result = schedule(snapshot(NODES, jobs, held, tree), BY_NODES)
    assert [s.job_id for s in result.starts] == [1, 2, 3]
    assert {p.node for s in result.starts for p in s.placements} == {"n1"}  # vision's own node
    assert result.pending[4].code is ReasonCode.LIMIT
    assert result.pending[4].message == (
        "limit: unit cs is at its limit of 5 GPUs (its projects hold 5; project vision's job needs 1 more)"
    )


def test_a_leaf_is_confined_to_its_own_quota_under_its_unit() -> None:
    tree = [Project("cs", quota=4), Project("vision", quota=2, parent="cs"), Project("nlp", quota=2, parent="cs")]
    result = schedule(snapshot(NODES, [pending(i, project="vision") for i in (1, 2, 3)], None, tree), BY_GPUS)
    assert [s.job_id for s in result.starts] == [1, 2]
    assert result.pending[3].message == (
        "quota: the isolated policy confines project vision to its quota of 2 GPUs; it holds 2 and this job needs 1"
    )


@pytest.mark.parametrize(
    ("gpu_model", "started", "on_h100", "why"),
    [
        # Asking H100: two start, the third waits naming the per-model quota.
        (
            "H100",
            2,
            2,
            "quota: the isolated policy confines project vision to its quota on each GPU model; it holds 2 of its"
            " 2 H100 (--quota H100=2); this job needs 1 more",
        ),
        # Asking nothing: two land on H100s, the rest of the total quota (2) on A100s, then it waits.
        (
            None,
            4,
            2,
            "quota: the isolated policy confines project vision to its quota of 4 GPUs; it holds 4 and this job needs 1",
        ),
    ],
)
def test_a_per_model_quota_confines_a_project_on_that_model(
    gpu_model: str | None, started: int, on_h100: int, why: str
) -> None:
    projects = [Project.create("vision", quota=4, quota_by_model={"H100": 2})]
    jobs = [pending(i, project="vision", gpu_model=gpu_model) for i in range(1, 7)]
    result = schedule(snapshot(FLEET, jobs, None, projects), BY_GPUS)
    assert len(result.starts) == started
    assert sum(p.node == "h1" for s in result.starts for p in s.placements) == on_h100
    first_waiting = min(result.pending)
    assert result.pending[first_waiting].code is ReasonCode.QUOTA
    assert result.pending[first_waiting].message == why


def test_only_per_model_quotas_confine_a_project_to_those_models() -> None:
    projects = [Project.create("vision", quota=2, quota_by_model={"H100": 2})]  # --quota H100=2: all of it H100
    jobs = [pending(i, project="vision") for i in (1, 2, 3)]
    result = schedule(snapshot(FLEET, jobs, None, projects), BY_GPUS)
    assert {p.node for s in result.starts for p in s.placements} == {"h1"}
    assert len(result.starts) == 2


def test_a_per_model_limit_still_holds_under_isolated() -> None:
    projects = [Project.create("vision", quota=4, limit_by_model={"H100": 1})]
    jobs = [pending(i, project="vision", gpu_model="H100") for i in (1, 2)]
    result = schedule(snapshot(FLEET, jobs, None, projects), BY_GPUS)
    assert [s.job_id for s in result.starts] == [1]
    assert result.pending[2].code is ReasonCode.LIMIT
    assert (
        result.pending[2].message
        == "limit: project vision holds 1 of its 1 H100 (--limit H100=1); this job needs 1 more"
    )


def test_per_model_caps_are_the_quotas_and_the_rest_of_the_total() -> None:
    vision = Project.create("vision", quota=6, quota_by_model={"H100": 2}, limit_by_model={"A100": 1})
    assert model_caps(vision, {"H100", "A100", "L4"}) == {"A100": 4, "H100": 2, "L4": 4}
    assert confined([vision], {"H100", "A100"})[0].limit_by_model == {"A100": 1, "H100": 2}  # the lower of the two
    flat = Project("bio", quota=4)
    assert model_caps(flat, {"H100"}) == {} and confined([flat], {"H100"})[0] is flat

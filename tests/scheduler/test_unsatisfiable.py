"""No job waits forever for a cluster that cannot exist (issue 19): one that no state of the
cluster could run is refused at submit, saying the largest placement there is; one that only
nodes now down, drained or out of service could run waits as ``unsatisfiable``, naming them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.errors import Unsatisfiable
from gpupool.domain.jobs import JobSpec
from gpupool.domain.nodes import Node, NodeState
from gpupool.scheduler import schedule
from gpupool.scheduler.capacity import idle_slots, room_for
from gpupool.scheduler.demand import WorkerDemand
from gpupool.usecases.submission import check_satisfiable
from tests.support.builders import node, pending, running, snapshot

UP, DOWN, DRAINED, DRAINING = NodeState.UP, NodeState.DOWN, NodeState.DRAINED, NodeState.DRAINING


def spec(**fields: object) -> JobSpec:
    return JobSpec.create(command=["true"], **fields)  # type: ignore[arg-type]


@dataclass
class Slots:
    name: str
    node: Node
    fields: dict[str, object]
    slots: int
    in_service: int | None = None  # on healthy GPUs alone, where it differs


SLOTS = [
    Slots("whole GPUs", node("n", 8), {"gpus": 4}, 2),
    Slots("a remainder holds no worker", node("n", 6), {"gpus": 4}, 1),
    Slots("cores bound it", node("n", 8, cpus=6), {"gpus": 1, "cpus": 4}, 1),
    Slots("memory bounds it", node("n", 8, memory_mib=4096), {"gpus": 1, "memory": "3G"}, 1),
    Slots("shares: four quarters a GPU", node("n", 2), {"gpus": 0.25}, 8),
    Slots("shares: bound by GPU memory", node("n", 1, gpu_memory_mib=16384), {"gpus": 0.25, "gpu_memory": "10G"}, 1),
    Slots("a model nobody here has", node("n", 8, model="A100"), {"gpus": 1, "gpu_model": "H100"}, 0),
    Slots("whole GPUs too small", node("n", 4, gpu_memory_mib=16384), {"gpus": 1, "gpu_memory": "40G"}, 0),
    Slots("no GPU, no cores, no memory", node("n", 0), {"gpus": 0}, 1_000_000),
    Slots("unhealthy GPUs count unless in service only", node("n", 8, unhealthy=(0, 1)), {"gpus": 4}, 2, 1),
]


@pytest.mark.parametrize("case", SLOTS, ids=[c.name for c in SLOTS])
def test_idle_slots(case: Slots) -> None:
    demand = WorkerDemand.of(spec(**case.fields))
    assert idle_slots(case.node, demand) == case.slots
    in_service = case.slots if case.in_service is None else case.in_service
    assert idle_slots(case.node, demand, in_service_only=True) == in_service


def test_holds_stops_counting_once_the_gang_fits() -> None:
    demand = WorkerDemand.of(spec(gpus=4))
    nodes = [node(f"n{i}") for i in range(100)]
    assert room_for(demand, nodes, 3) == 3
    assert room_for(demand, nodes[:2], 3) == 2


@dataclass
class Submit:
    name: str
    nodes: list[Node]
    fields: dict[str, object]
    refused: str | None  # a part of the message, or None: accepted


SUBMITS = [
    Submit(
        "a gang wider than the cluster (issue 19's case)",
        [node("n1"), node("n2")],
        {"gpus": 4, "workers": 3},
        "3 workers × 4 GPUs can never run here: all 2 nodes together, idle, hold 2 such workers; "
        "ask for at most 2 workers",
    ),
    Submit("a gang as wide as the cluster", [node("n1"), node("n2")], {"gpus": 4, "workers": 2}, None),
    Submit(
        "a down and a drained node count: they may come back",
        [node("n1"), node("n2", state=DOWN), node("n3", state=DRAINED)],
        {"gpus": 4, "workers": 3},
        None,
    ),
    Submit(
        "cores and GPUs each fit some node, never the same one",
        [node("big", 8, cpus=4), node("wide", 2, cpus=64)],
        {"gpus": 8, "cpus": 32},
        "1 worker × 8 GPUs, 32 CPU cores can never run here: all 2 nodes together, idle, hold not one such worker",
    ),
    Submit("a share", [node("n1", 1)], {"gpus": 0.25}, None),
    Submit(
        "a gang of CPU-only workers bound by cores",
        [node("n1", 0, cpus=8)],
        {"gpus": 0, "cpus": 4, "workers": 3},
        "3 workers × 4 CPU cores can never run here",
    ),
    Submit("no node yet (a Ray head before its nodes join)", [], {"gpus": 4, "workers": 3}, None),
    Submit(
        "an elastic job whose most could never run (issue 35)",
        [node("n1"), node("n2")],
        {"gpus": 4, "workers": "1:3"},
        "3 workers × 4 GPUs can never run here: all 2 nodes together, idle, hold 2 such workers; "
        "ask for --workers 1:2 at most",
    ),
    Submit(
        "an elastic job as wide as the cluster at most", [node("n1"), node("n2")], {"gpus": 4, "workers": "1:2"}, None
    ),
]


@pytest.mark.parametrize("case", SUBMITS, ids=[c.name for c in SUBMITS])
def test_submit_refuses_what_no_state_of_the_cluster_could_run(case: Submit) -> None:
    if case.refused is None:
        check_satisfiable(spec(**case.fields), case.nodes)
        return
    with pytest.raises(Unsatisfiable) as refused:
        check_satisfiable(spec(**case.fields), case.nodes)
    assert case.refused in refused.value.message
    assert refused.value.status == 422 and refused.value.code == "unsatisfiable"


@dataclass
class Waits:
    name: str
    nodes: list[Node]
    fields: dict[str, object]
    code: ReasonCode
    says: tuple[str, ...]


WAITS = [
    Waits(
        "a gang that needs a down node names it",
        [node("n1"), node("n2", state=DOWN)],
        {"gpus": 4, "workers": 2},
        ReasonCode.UNSATISFIABLE,
        ("needs 2 workers × 4 GPUs; the nodes that are up hold 1 such worker even when idle", "waits for n2 (down)"),
    ),
    Waits(
        "drained and draining nodes are named with their state",
        [node("n1"), node("n2", state=DRAINED), node("n3", state=DRAINING)],
        {"gpus": 4, "workers": 3},
        ReasonCode.UNSATISFIABLE,
        ("waits for n2 (drained), n3 (draining) to be back in service",),
    ),
    Waits(
        "GPUs out of service on a node that is up",
        [node("n1", unhealthy=(3,)), node("n2")],
        {"gpus": 4, "workers": 2},
        ReasonCode.UNSATISFIABLE,
        ("waits for n1 (GPUs out of service)",),
    ),
    Waits(
        "one worker wider than any node that is up names the node it waits for",
        [node("n1", 2), node("n2", 8, state=DOWN)],
        {"gpus": 8},
        ReasonCode.UNSATISFIABLE,
        ("largest node that is up has 2", "waits for n2 (down)"),
    ),
    Waits(
        "a node that could not host a worker is not named",
        [node("n1"), node("n2", state=DOWN), node("n3", 2, state=DOWN)],
        {"gpus": 4, "workers": 2},
        ReasonCode.UNSATISFIABLE,
        ("waits for n2 (down) to be back",),
    ),
    Waits(
        "a cluster that shrank since the submit: it says so",
        [node("n1"), node("n2", 2, state=DOWN)],
        {"gpus": 4, "workers": 2},
        ReasonCode.UNSATISFIABLE,
        ("even with every node back and idle it could not run: cancel it",),
    ),
]


@pytest.mark.parametrize("case", WAITS, ids=[c.name for c in WAITS])
def test_a_job_only_nodes_not_in_service_could_run_waits_as_unsatisfiable(case: Waits) -> None:
    result = schedule(snapshot(case.nodes, [pending(1, **case.fields)]))  # type: ignore[arg-type]
    reason = result.pending[1]
    assert reason.code is case.code, reason
    for words in case.says:
        assert words in reason.message, reason.message


def test_a_gang_that_fits_once_jobs_end_waits_as_a_gang_not_as_unsatisfiable() -> None:
    nodes = [node("n1"), node("n2")]
    result = schedule(snapshot(nodes, [pending(1, gpus=4, workers=2)], [running(9, ("n1", (0,)))]))
    assert result.pending[1].code is ReasonCode.GANG
    assert "only 1 such slot free" in result.pending[1].message

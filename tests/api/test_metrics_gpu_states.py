"""``gpupool_gpus{node,state}``: each GPU is in exactly one state, whatever mix of node state,
health and holding it has."""

from __future__ import annotations

import pytest

from gpupool.domain.nodes import NodeState
from gpupool.domain.records import NodeRecord
from gpupool.usecases.metrics import GPU_STATES, gpu_states
from tests.support.builders import node


@pytest.mark.parametrize(
    ("state", "unhealthy", "held", "expected"),
    [
        # GPUs 0..3; held: GPU index -> jobs on it
        (NodeState.UP, (), {}, {"free": 4}),
        (NodeState.UP, (3,), {0: [1], 1: [2, 3]}, {"allocated": 2, "free": 1, "unhealthy": 1}),
        (NodeState.UP, (0,), {0: [1]}, {"unhealthy": 1, "free": 3}),  # out of service while a job keeps it
        (NodeState.DRAINING, (), {0: [1]}, {"allocated": 1, "unavailable": 3}),
        (NodeState.DRAINED, (1,), {}, {"unhealthy": 1, "unavailable": 3}),
        (NodeState.DOWN, (1,), {}, {"unavailable": 4}),  # what was heard of its health is stale
    ],
)
def test_every_gpu_has_one_state(
    state: NodeState, unhealthy: tuple[int, ...], held: dict[int, list[int]], expected: dict[str, int]
) -> None:
    record = NodeRecord(
        node=node("n", 4, state=state, unhealthy=unhealthy), gpus_free=0, simulated=True, used_gpus=held
    )
    counts = gpu_states(record)
    assert list(counts) == list(GPU_STATES)
    assert counts == {s: expected.get(s, 0) for s in GPU_STATES}

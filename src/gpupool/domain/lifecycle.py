"""Transition tables, one per lifecycle (DESIGN §2).

Nothing sets a state field directly: the store's ``transition`` checks a move against these
tables and records an event in the same transaction.
"""

from __future__ import annotations

from gpupool.domain.errors import Conflict
from gpupool.domain.jobs import JobState
from gpupool.domain.nodes import NodeState

J = JobState
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    J.PENDING: frozenset({J.STARTING, J.CANCELLED}),
    # STARTING -> PENDING: the head died between deciding and launching; the launch is retried.
    J.STARTING: frozenset({J.RUNNING, J.PENDING, J.FAILED, J.CANCELLED, J.LOST}),
    # RUNNING -> PENDING: a worker failed and the job has restarts left (requeued whole).
    J.RUNNING: frozenset({J.SUCCEEDED, J.FAILED, J.CANCELLED, J.PREEMPTED, J.LOST, J.PENDING}),
    J.PREEMPTED: frozenset({J.PENDING}),
    J.LOST: frozenset({J.PENDING, J.FAILED}),
    J.SUCCEEDED: frozenset(),
    J.FAILED: frozenset(),
    J.CANCELLED: frozenset(),
}

N = NodeState
NODE_TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    N.UP: frozenset({N.DRAINING, N.DOWN}),
    N.DRAINING: frozenset({N.DRAINED, N.UP, N.DOWN}),
    N.DRAINED: frozenset({N.UP, N.DOWN}),
    # DOWN -> DRAINING | DRAINED: a node an admin drained while it was down comes back drained.
    N.DOWN: frozenset({N.UP, N.DRAINING, N.DRAINED}),
}


def check_job_transition(job_id: int, current: JobState, target: JobState) -> None:
    if target not in JOB_TRANSITIONS[current]:
        raise Conflict(f"job {job_id} is {current.value}; it cannot become {target.value}", code="invalid_state")


def check_node_transition(name: str, current: NodeState, target: NodeState) -> None:
    if target not in NODE_TRANSITIONS[current]:
        raise Conflict(f"node {name} is {current.value}; it cannot become {target.value}", code="invalid_state")

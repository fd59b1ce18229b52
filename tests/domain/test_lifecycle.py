import pytest

from gpupool.domain.errors import Conflict
from gpupool.domain.jobs import TERMINAL_STATES, JobState
from gpupool.domain.lifecycle import JOB_TRANSITIONS, NODE_TRANSITIONS, check_job_transition

J = JobState

LEGAL = [
    (J.PENDING, J.STARTING),
    (J.PENDING, J.CANCELLED),
    (J.STARTING, J.RUNNING),
    (J.RUNNING, J.SUCCEEDED),
    (J.RUNNING, J.FAILED),
    (J.RUNNING, J.PREEMPTED),
    (J.PREEMPTED, J.PENDING),
    (J.RUNNING, J.LOST),
    (J.LOST, J.PENDING),
    (J.LOST, J.FAILED),
    (J.RUNNING, J.CANCELLED),
]
ILLEGAL = [
    (J.PENDING, J.RUNNING),
    (J.PENDING, J.SUCCEEDED),
    (J.SUCCEEDED, J.PENDING),
    (J.FAILED, J.RUNNING),
    (J.CANCELLED, J.PENDING),
    (J.PREEMPTED, J.RUNNING),
    (J.LOST, J.RUNNING),
]


@pytest.mark.parametrize(("a", "b"), LEGAL)
def test_design_transitions_are_allowed(a: JobState, b: JobState) -> None:
    check_job_transition(1, a, b)


@pytest.mark.parametrize(("a", "b"), ILLEGAL)
def test_other_transitions_are_refused(a: JobState, b: JobState) -> None:
    with pytest.raises(Conflict) as info:
        check_job_transition(7, a, b)
    assert info.value.code == "invalid_state"
    assert "job 7" in info.value.message


def test_tables_cover_every_state_and_terminal_states_are_final() -> None:
    assert set(JOB_TRANSITIONS) == set(JobState)
    for state in TERMINAL_STATES:
        assert JOB_TRANSITIONS[state] == frozenset()
    for targets in NODE_TRANSITIONS.values():
        assert targets <= set(NODE_TRANSITIONS)

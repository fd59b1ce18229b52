import pytest

from gpupool.domain.outcome import StopReason, Verdict, judge
from gpupool.domain.records import WorkerStatus
from tests.support.builders import E, L, R, workers


@pytest.mark.parametrize(
    ("states", "cancel", "restarts", "max_restarts", "verdict", "code"),
    [
        ([(R, None), (R, None)], False, 0, 0, Verdict.WAIT, None),
        ([(E, 0), (R, None)], False, 0, 0, Verdict.WAIT, None),
        ([(E, 0), (E, 0)], False, 0, 0, Verdict.SUCCEEDED, 0),
        ([(E, 3), (R, None)], False, 0, 0, Verdict.STOP_REST, 3),
        ([(E, 3), (E, 143)], False, 0, 0, Verdict.FAILED, 3),
        ([(E, 3), (E, 143)], False, 0, 2, Verdict.REQUEUE, 3),
        ([(E, 3), (E, 143)], False, 2, 2, Verdict.FAILED, 3),
        ([(L, None), (R, None)], False, 0, 1, Verdict.STOP_REST, None),
        ([(L, None), (E, 143)], False, 0, 1, Verdict.REQUEUE, None),
        ([(R, None)], True, 0, 5, Verdict.STOP_REST, None),
        ([(E, 143)], True, 0, 5, Verdict.CANCELLED, 143),
    ],
)
def test_judge(
    states: list[tuple[WorkerStatus, int | None]],
    cancel: bool,
    restarts: int,
    max_restarts: int,
    verdict: Verdict,
    code: int | None,
) -> None:
    outcome = judge(
        workers(*states), stop=StopReason.CANCEL if cancel else None, restarts=restarts, max_restarts=max_restarts
    )
    assert outcome.verdict is verdict
    assert outcome.exit_code == code


def test_the_first_failure_names_the_exit_code_not_the_killed_peers() -> None:
    outcome = judge(workers((E, 143), (E, 7)), stop=None, restarts=0, max_restarts=0)
    # worker 0 finished first in time (T0+0s) with 143, so it is the first failure
    assert outcome.exit_code == 143
    later_first = workers((E, 143), (E, 7))
    swapped = [later_first[1], later_first[0]]
    assert judge(swapped, stop=None, restarts=0, max_restarts=0).exit_code == 143

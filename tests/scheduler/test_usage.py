"""Usage decay and its effect on the order projects are served in."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.projects import Project
from gpupool.domain.usage import decayed_average
from gpupool.scheduler import schedule
from tests.support.builders import node, pending, snapshot


@pytest.mark.parametrize(
    ("previous", "holding", "elapsed", "half_life", "expected"),
    [
        (8.0, 0.0, 3600, 3600, 4.0),
        (8.0, 0.0, 7200, 3600, 2.0),
        (0.0, 4.0, 3600, 3600, 2.0),
        (5.0, 5.0, 123, 3600, 5.0),
        (8.0, 2.0, 0, 3600, 8.0),
        (8.0, 2.0, 10, 0, 2.0),
    ],
)
def test_decayed_average(previous: float, holding: float, elapsed: float, half_life: float, expected: float) -> None:
    assert decayed_average(previous, holding, elapsed, half_life) == pytest.approx(expected)


def test_converges_to_what_is_held() -> None:
    avg = 0.0
    for _ in range(200):
        avg = decayed_average(avg, 6.0, 600, 3600)
    assert avg == pytest.approx(6.0, rel=1e-6)


def test_a_project_that_used_much_lately_yields_to_one_that_did_not() -> None:
    projects = [Project("a", quota=2), Project("b", quota=2)]
    queue = [pending(1, project="a", at=1), pending(2, project="b", at=2)]
    fresh = schedule(snapshot([node("n1", 1)], queue, projects=projects))
    assert [s.job_id for s in fresh.starts] == [1]  # equal load: a is first by name
    heavy_a = replace(snapshot([node("n1", 1)], queue, projects=projects), recent_usage={"a": 3.0})
    assert [s.job_id for s in schedule(heavy_a).starts] == [2]

"""The autoscaler (domain/autoscale.py): a table of cases, then properties over random load."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.autoscale import AutoscalePolicy, AutoscaleState, LoadSample, autoscale, load

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reports(*totals: tuple[float, int, int], replica: str = "7") -> list[LoadSample]:
    """(seconds, in flight, queued) per report, all on one replica."""
    return [LoadSample(at(t), replica, f, q) for t, f, q in totals]


POLICY = AutoscalePolicy(min_replicas=1, max_replicas=8, target_concurrency=4, down_delay_s=60, window_s=30)


@dataclass
class Case:
    name: str
    current: int
    samples: list[LoadSample]
    now: float
    want: int
    policy: AutoscalePolicy = POLICY
    state: AutoscaleState = field(default_factory=AutoscaleState)


CASES = [
    Case("no report: holds the floor", 1, [], 100, 1),
    Case("load 16 at 4 per replica asks for 4, at once", 1, reports((95, 12, 4)), 100, 4),
    Case("up to the ceiling, never past it", 2, reports((95, 100, 100)), 100, 8),
    Case("reports outside the window do not count", 1, reports((10, 100, 0)), 100, 1),
    Case("the window's mean: 8 then 0 is 4, one replica", 1, reports((90, 8, 0), (95, 0, 0)), 100, 1),
    Case("less load: held until quiet for the delay", 4, reports((95, 1, 0)), 100, 4),
    Case(
        "quiet for the delay: down to the most asked meanwhile",
        4,
        reports((195, 5, 0)),
        200,
        2,
        state=AutoscaleState(below_since=at(100), below_peak=2),
    ),
    Case(
        "scale to zero: nothing in flight for the delay",
        1,
        [],
        200,
        0,
        policy=AutoscalePolicy(0, 4, 4, down_delay_s=60, scale_to_zero=True),
        state=AutoscaleState(below_since=at(100)),
    ),
    Case(
        "at zero, a waiting request asks for a replica at once, whatever the up delay",
        0,
        [LoadSample(at(99), "", 0, 1)],
        100,
        1,
        policy=AutoscalePolicy(0, 4, 4, up_delay_s=600, scale_to_zero=True),
    ),
    Case("min 0 without scale-to-zero keeps one", 1, [], 1000, 1, policy=AutoscalePolicy(0, 4, 4, down_delay_s=0)),
    Case(
        "an up delay holds the count until load stayed high that long",
        1,
        reports((99, 40, 0)),
        100,
        1,
        policy=AutoscalePolicy(1, 8, 4, up_delay_s=10),
    ),
    Case(
        "... and then scales up",
        1,
        reports((99, 40, 0)),
        100,
        8,
        policy=AutoscalePolicy(1, 8, 4, up_delay_s=10),
        state=AutoscaleState(above_since=at(85)),
    ),
    Case("a count outside the bounds is brought inside", 12, [], 100, 8),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    decision = autoscale(case.policy, case.current, case.samples, at(case.now), case.state)
    assert decision.replicas == case.want, decision.reason
    assert decision.reason


def test_replicas_of_one_report_add_up() -> None:
    samples = [LoadSample(at(1), "a", 3, 1), LoadSample(at(1), "b", 2, 2), LoadSample(at(2), "a", 0, 0)]
    assert load(samples, at(2), 30) == 4.0  # (8 + 0) / 2 reports


def test_hysteresis_holds_through_a_dip_then_a_burst() -> None:
    """Load falls for 50 s (under the 60 s delay), then comes back: the count never dropped."""
    state, current = AutoscaleState(), 4
    for t in range(100, 150, 5):
        d = autoscale(POLICY, current, reports((t, 1, 0)), at(t), state)
        state, current = d.state, d.replicas
        assert current == 4
    d = autoscale(POLICY, current, reports((150, 16, 0)), at(150), state)
    assert d.replicas == 4 and d.state == AutoscaleState()


@given(
    st.integers(0, 8),
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 200), st.integers(0, 200)), max_size=20),
    st.booleans(),
    st.integers(0, 8),
)
def test_always_within_bounds_and_never_down_before_the_delay(
    current: int, points: list[tuple[int, int, int]], to_zero: bool, low: int
) -> None:
    policy = AutoscalePolicy(0 if to_zero else low, 8, 4, down_delay_s=60, scale_to_zero=to_zero)
    now = at(60)
    d = autoscale(policy, current, reports(*((float(t), f, q) for t, f, q in points)), now)
    assert policy.floor <= d.replicas <= policy.max_replicas
    if policy.floor <= current <= policy.max_replicas:
        assert d.replicas >= current  # a fresh state: no quiet spell yet, so never down

"""The autoscaler: from recent load to a number of replicas. A pure function, as the scheduler is
(STYLE: Ray Serve keeps the arithmetic pure and its hysteresis state apart), so it is tested with
tables and properties and never needs a clock, a gateway or a database.

Load is what the gateway reports per replica: requests in flight plus requests queued for it. Over
the window, each report's sum over replicas is one reading; the mean reading divided by the target
concurrency per replica, rounded up, is what the load asks for.

- Up fast: more is asked for at once (or once it has been asked for ``up_delay_s``).
- Down slow: fewer only after load asked for fewer continuously for ``down_delay_s``; then to the
  most any reading asked for during that quiet spell, so a dip does not cut what a burst needs.
- To zero only where the service allows it; at zero, any waiting request asks for one replica
  (the gateway holds the first request until a replica is ready, or until its timeout).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class AutoscalePolicy:
    min_replicas: int
    max_replicas: int
    target_concurrency: float  # in-flight + queued requests one replica should carry
    up_delay_s: float = 0.0
    down_delay_s: float = 60.0
    scale_to_zero: bool = False
    window_s: float = 30.0

    @property
    def floor(self) -> int:
        """The fewest replicas: ``min_replicas``, at least one unless scale-to-zero is allowed."""
        if self.scale_to_zero or self.min_replicas > 0:
            return self.min_replicas
        return min(1, self.max_replicas)


@dataclass(frozen=True, slots=True)
class LoadSample:
    """One replica's load in one gateway report (``at``). ``replica`` "" stands for requests the
    gateway holds for a service that has no ready replica."""

    at: datetime
    replica: str
    in_flight: int
    queued: int


@dataclass(frozen=True, slots=True)
class AutoscaleState:
    """What the autoscaler remembers between calls: since when load has asked for more, or for
    fewer (and the most it asked for meanwhile)."""

    above_since: datetime | None = None
    below_since: datetime | None = None
    below_peak: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "above_since": self.above_since.isoformat() if self.above_since else None,
            "below_since": self.below_since.isoformat() if self.below_since else None,
            "below_peak": self.below_peak,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AutoscaleState:
        def at(key: str) -> datetime | None:
            value = data.get(key)
            return datetime.fromisoformat(value) if isinstance(value, str) else None

        peak = data.get("below_peak", 0)
        return cls(at("above_since"), at("below_since"), peak if isinstance(peak, int) else 0)


@dataclass(frozen=True, slots=True)
class AutoscaleDecision:
    replicas: int
    state: AutoscaleState
    reason: str


def load(samples: Iterable[LoadSample], now: datetime, window_s: float) -> float:
    """The mean over the window's reports of their summed in-flight and queued requests (0 with
    no report in the window: no gateway, or no traffic)."""
    since = now - timedelta(seconds=window_s)
    by_report: dict[datetime, int] = {}
    for s in samples:
        if since <= s.at <= now:
            by_report[s.at] = by_report.get(s.at, 0) + max(0, s.in_flight) + max(0, s.queued)
    return sum(by_report.values()) / len(by_report) if by_report else 0.0


def wanted(policy: AutoscalePolicy, mean_load: float) -> int:
    """What the load asks for, within [floor, max]."""
    asked = math.ceil(mean_load / policy.target_concurrency - 1e-9) if mean_load > 0 else 0
    return max(policy.floor, min(policy.max_replicas, asked))


def autoscale(
    policy: AutoscalePolicy,
    current: int,
    samples: Iterable[LoadSample],
    now: datetime,
    state: AutoscaleState = AutoscaleState(),
) -> AutoscaleDecision:
    """The number of replicas to run from now, the state to remember, and why."""
    mean = load(samples, now, policy.window_s)
    target = wanted(policy, mean)
    seen = f"load {mean:.1f} over {policy.window_s:g}s at target {policy.target_concurrency:g} per replica"
    if current < policy.floor or current > policy.max_replicas:
        bounded = max(policy.floor, min(policy.max_replicas, current))
        return AutoscaleDecision(
            bounded, AutoscaleState(), f"{current} is outside {policy.floor}..{policy.max_replicas}"
        )
    if target > current:
        since = state.above_since or now
        if current == 0 or (now - since).total_seconds() >= policy.up_delay_s:
            return AutoscaleDecision(target, AutoscaleState(), f"up to {target}: {seen}")
        return AutoscaleDecision(
            current, AutoscaleState(above_since=since), f"holding {current} before scaling up: {seen}"
        )
    if target < current:
        since = state.below_since or now
        peak = max(target, state.below_peak if state.below_since else 0)
        if (now - since).total_seconds() >= policy.down_delay_s:
            return AutoscaleDecision(
                peak, AutoscaleState(), f"down to {peak} after {policy.down_delay_s:g}s quiet: {seen}"
            )
        quiet = replace(AutoscaleState(), below_since=since, below_peak=peak)
        return AutoscaleDecision(current, quiet, f"holding {current} until quiet for {policy.down_delay_s:g}s: {seen}")
    return AutoscaleDecision(current, AutoscaleState(), f"steady at {current}: {seen}")

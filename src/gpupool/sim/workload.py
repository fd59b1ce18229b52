"""Shaping a trace before a replay: a time window, a scaled arrival rate, a seeded arrival order.

These are the knobs of a capacity question ("the busiest two weeks", "50% more load", "does the
answer depend on the order of simultaneous arrivals?"), applied to the loaded jobs so every
trace format gets them alike.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.sim.trace_job import TraceJob

Bound = float | datetime | None  # seconds after the trace's first submission, a date, or open


@dataclass(frozen=True, slots=True)
class Window:
    start: Bound
    end: Bound

    @classmethod
    def parse(cls, text: str) -> Window:
        """``START,END``: each a duration after the first submission (``3600``, ``30d``), a date
        (``2017-10-01`` or ``2017-10-01T12:00``, for traces with dates), or empty for open."""
        parts = text.split(",")
        if len(parts) != 2:
            raise InvalidInput(f"malformed window {text!r}: use START,END, e.g. 0,7d or 2017-10-01,2017-12-01")
        start, end = (_bound(p.strip()) for p in parts)
        if isinstance(start, datetime) != isinstance(end, datetime) and start is not None and end is not None:
            raise InvalidInput(f"window {text!r}: give both ends as dates or both as durations")
        if start is not None and end is not None and _key(end) <= _key(start):
            raise InvalidInput(f"window {text!r}: its end must come after its start")
        return cls(start, end)

    def select(self, jobs: Sequence[TraceJob], dated: bool) -> tuple[list[TraceJob], float]:
        """The jobs submitted in ``[start, end)`` (raw trace times) and the time the replay counts
        from: the window's start where it has one."""
        first = min((j.submit_time for j in jobs), default=0.0)
        start, end = self._absolute(self.start, first, dated), self._absolute(self.end, first, dated)
        chosen = [j for j in jobs if (start is None or j.submit_time >= start) and (end is None or j.submit_time < end)]
        if not chosen:
            raise InvalidInput("no job of the trace was submitted within the window")
        return chosen, start if start is not None else min(j.submit_time for j in chosen)

    @staticmethod
    def _absolute(bound: Bound, first: float, dated: bool) -> float | None:
        if bound is None:
            return None
        if isinstance(bound, datetime):
            if not dated:
                raise InvalidInput("this trace's times are seconds, not dates: give the window as durations")
            return bound.timestamp()
        return first + bound


def scale_load(jobs: Sequence[TraceJob], factor: float) -> list[TraceJob]:
    """Arrivals ``factor`` times as frequent (submit times divided by it); run times unchanged."""
    if not factor > 0:
        raise InvalidInput(f"--scale-load must be > 0 (got {factor:g}): 2 doubles the arrival rate")
    if factor == 1:
        return list(jobs)
    return [replace(j, submit_time=j.submit_time / factor) for j in jobs]


def shuffle_arrivals(jobs: Sequence[TraceJob], seed: int) -> list[TraceJob]:
    """A seeded arrival order where the trace does not fix one: jobs submitted at the same time
    are shuffled among themselves; a placement study (no job ever ends, as the openb lists
    without times) gets its whole order shuffled, as FGD's ``--shuffle-pod`` did."""
    rng = random.Random(seed)
    if jobs and all(j.duration is None for j in jobs):
        times = sorted(j.submit_time for j in jobs)
        order = list(jobs)
        rng.shuffle(order)
        return [replace(j, submit_time=t) for j, t in zip(order, times, strict=True)]
    keyed = [(j.submit_time, rng.random(), i) for i, j in enumerate(jobs)]
    return [jobs[i] for _, _, i in sorted(keyed)]


def _bound(text: str) -> Bound:
    if not text:
        return None
    if "-" in text[1:]:
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            raise InvalidInput(
                f"malformed date {text!r} in the window: use e.g. 2017-10-01 or 2017-10-01T12:00"
            ) from None
    return parse_duration(text)


def _key(bound: float | datetime) -> float:
    return bound.timestamp() if isinstance(bound, datetime) else bound

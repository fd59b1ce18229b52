"""Elastic jobs in a replay (issue 35): which of a trace's jobs are elastic, and how fast a job
runs at a width other than the one the trace measured.

The speed model. A trace job's duration is what it took at its full width ``W`` (the trace's
worker count, the elastic job's maximum). At width ``w`` it runs at ``speed(w) = (w / W) **
alpha`` of that: ``alpha = 1`` is perfectly linear scaling, ``alpha = 0`` none at all, and the
default 0.8 is sublinear, as data-parallel training scales (a larger global batch needs more
steps, and the all-reduce grows with the workers; Pollux and Sia measure exponents of 0.6 to 0.9
for the models in their traces). The replay keeps each running job's remaining work in seconds
of its full-width duration: it drains at ``speed(w)`` (times a power cap's speed, ``power.py``),
and at every grow or shrink the job's end is recomputed from what is left at the new rate. A
rigid gang always runs at its full width (speed 1), so traces without elastic jobs replay as
before.

Marking a trace's jobs elastic (``--elastic``): each multi-worker job keeps its width as its
maximum and gets a minimum of ``ceil(fraction x width)`` (at least 1); ``half`` is 0.5. A job of
one worker stays rigid (it has nothing to give back). A ``min_workers`` column in the gpupool
trace format marks single jobs (``trace.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec
from gpupool.sim.trace_job import TraceJob

DEFAULT_ALPHA = 0.8
NAMED_FRACTIONS = {"half": 0.5}


def speed(spec: JobSpec, width: int, alpha: float = DEFAULT_ALPHA) -> float:
    """The share of its full-width speed a job runs at on ``width`` workers (1 at its full width)."""
    full = spec.most_workers
    if width >= full:
        return 1.0
    return math.pow(width / full, alpha)


def parse_fraction(text: str) -> float:
    """``--elastic``: ``half`` or a fraction in (0, 1] of a job's width that is its minimum."""
    value = NAMED_FRACTIONS.get(text.strip().lower())
    if value is None:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
    if not 0 < value <= 1:
        raise InvalidInput(f"--elastic {text!r}: give half or a fraction of a job's width above 0 and at most 1")
    return value


def check_alpha(alpha: float) -> float:
    """``--elastic-alpha``: the scaling exponent, 0 (no speed-up) to 1 (linear)."""
    if not 0 <= alpha <= 1:
        raise InvalidInput(f"--elastic-alpha {alpha:g}: give an exponent from 0 (no speed-up) to 1 (linear)")
    return alpha


def minimum(width: int, fraction: float) -> int:
    """The least workers of a job ``width`` wide made elastic at ``fraction``."""
    return max(1, min(width, math.ceil(fraction * width - 1e-9)))


def make_elastic(jobs: Sequence[TraceJob], fraction: float) -> list[TraceJob]:
    """The trace with each multi-worker job elastic from ``minimum(width, fraction)`` to its width
    (one already elastic keeps its own range); one-worker jobs unchanged."""
    out = []
    for job in jobs:
        spec = job.spec
        if not spec.elastic and spec.workers > 1:
            least = minimum(spec.workers, fraction)
            if least < spec.workers:
                job = replace(job, spec=replace(spec, workers=least, max_workers=spec.workers))
        out.append(job)
    return out


@dataclass(slots=True)
class Progress:
    """A running job's progress in its current run, in segments of constant rate: a grow, a
    shrink or a stop closes one (``advance``)."""

    since: float  # when the current segment began
    power: float  # its speed under its power limit (1: full)
    rate: float  # seconds of its full-width duration done per second now: ``power`` x ``speed(width)``
    gpus: float  # GPUs it holds now
    work: float = 0.0  # seconds of its duration done in this run before ``since``
    gpu_s: float = 0.0  # GPU-seconds this run received before ``since``

    def advance(self, now: float) -> None:
        span = max(0.0, now - self.since)
        self.work += span * self.rate
        self.gpu_s += span * self.gpus
        self.since = now

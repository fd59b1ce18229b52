"""The elastic options of ``gpupool simulate`` (issue 35): which of a trace's multi-worker jobs
replay as elastic jobs, and the exponent of the speed model (``sim/elastic.py`` describes both)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.sim import elastic
from gpupool.sim.trace_job import TraceJob

ElasticOpt = Annotated[
    str | None,
    typer.Option(
        help="make each multi-worker job elastic, its minimum this part of its width: half, or a fraction like 0.25"
    ),
]
AlphaOpt = Annotated[
    float,
    typer.Option(help="an elastic job on w of its W workers runs at (w/W)^alpha of full speed: 1 linear, 0 no gain"),
]


def checked(fraction: str | None, alpha: float) -> float | None:
    """The options read before any trace is loaded, so bad input costs no waiting."""
    elastic.check_alpha(alpha)
    return None if fraction is None else elastic.parse_fraction(fraction)


def apply(jobs: list[TraceJob], fraction: float | None) -> list[TraceJob]:
    """The jobs with the multi-worker ones elastic, where asked."""
    return jobs if fraction is None else elastic.make_elastic(jobs, fraction)

"""Elastic jobs (issue 35): a job that runs on MIN to MAX workers, grows into idle GPUs and gives
back only the workers above its minimum.

Here: how ``--workers`` is read (``4`` or ``2:8``). The scheduler's side is
``scheduler/actions/grow.py`` and ``shrink.py``; the workers' rendezvous is ``domain/worker_env.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from gpupool.domain import bounds
from gpupool.domain.errors import InvalidInput

MAX_WORKERS = 4096


def _whole_workers(value: object, what: str) -> int:
    if isinstance(value, str):
        text = value.strip()
        # ASCII digits only, and few: str.isdigit() also takes '²', which int() refuses
        value = int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else value
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_WORKERS:
        raise InvalidInput(f"{what} must be a whole number from 1 to {MAX_WORKERS}, got {bounds.shown(value)}")
    return value


def parse_workers(workers: object, max_workers: object = None) -> tuple[int, int | None]:
    """``workers`` as a gang size (4) or an elastic range (``"2:8"``, issue 35), and an explicit
    maximum (the API's ``max_workers``): the minimum, and the maximum where it is above it (None: a
    rigid gang, so ``4:4`` is just 4)."""
    if isinstance(workers, str) and ":" in workers:
        if max_workers is not None:
            raise InvalidInput(f"workers {bounds.shown(workers)} already gives a maximum: leave max_workers out")
        low, _, high = workers.partition(":")
        least = _whole_workers(low.strip(), f"the least workers of {bounds.shown(workers)}")
        most = _whole_workers(high.strip(), f"the most workers of {bounds.shown(workers)}")
    else:
        least = _whole_workers(workers, "workers")
        most = least if max_workers is None else _whole_workers(max_workers, "max_workers")
    if least > most:
        raise InvalidInput(
            f"workers {least}:{most}: the least ({least}) is above the most ({most}); "
            f"write MIN:MAX, e.g. {most}:{least}"
        )
    return least, (most if most > least else None)


def width_over_time(spans: Iterable[tuple[datetime, datetime | None]]) -> list[tuple[datetime, int]]:
    """How many workers ran, from each worker's start and end (None: runs still): one point at each
    moment the count changed, oldest first. What the dashboard draws as an elastic job's width."""
    changes: dict[datetime, int] = {}
    for start, end in spans:
        changes[start] = changes.get(start, 0) + 1
        if end is not None:
            changes[end] = changes.get(end, 0) - 1
    points: list[tuple[datetime, int]] = []
    width = 0
    for at in sorted(changes):
        if changes[at] == 0:
            continue
        width += changes[at]
        points.append((at, width))
    return points


__all__ = ["MAX_WORKERS", "parse_workers", "width_over_time"]

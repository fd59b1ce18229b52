"""Durations as people type them: ``90``, ``90s``, ``30m``, ``2h``, ``1d``."""

from __future__ import annotations

import re

from gpupool.domain.errors import InvalidInput

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


MAX_DURATION_S = 100 * 365 * 86400  # a century: past it, date arithmetic leaves the calendar


def parse_duration(value: str) -> float:
    match = _DURATION_RE.match(value) if len(value) <= 64 else None
    if not match:
        raise InvalidInput(f"malformed duration {value[:64]!r}: use e.g. 90, 90s, 30m, 2h or 1d")
    seconds = float(match.group(1)) * _SECONDS[match.group(2).lower()]
    if seconds > MAX_DURATION_S:
        raise InvalidInput(f"duration {value!r} is longer than a century")
    return seconds


def format_duration(seconds: float) -> str:
    """A duration for a message, in the unit people read at that size: ``45s``, ``10m``, ``2.5h``."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"

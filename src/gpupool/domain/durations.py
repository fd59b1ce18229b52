"""Durations as people type them: ``90``, ``90s``, ``30m``, ``2h``, ``1d``."""

from __future__ import annotations

import re

from gpupool.domain.errors import InvalidInput

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str) -> float:
    match = _DURATION_RE.match(value)
    if not match:
        raise InvalidInput(f"malformed duration {value!r}: use e.g. 90, 90s, 30m, 2h or 1d")
    return float(match.group(1)) * _SECONDS[match.group(2).lower()]

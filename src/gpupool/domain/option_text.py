"""How a setting typed as text is read and bounded: a duration (``10s``, bounded 1s to 5m), a size
(``100M``, bounded 1M to 1T), addresses or networks. Each refusal is one ``InvalidInput`` line that
names the flag, so ``gpupool up`` and ``gpupool simulate`` say the same thing for the same mistake."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.resources import parse_bytes

MAX_NETWORKS = 64


def span(seconds: int) -> str:
    """A whole number of seconds for people: 42s, 5m, 2h05m, 3d."""
    if seconds < 60:
        return f"{max(seconds, 0)}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d"


def bounded_duration(flag: str, text: str, low: float, high: float) -> float:
    """A duration option's value in seconds, refused (one line, exit 2) outside ``[low, high]``."""
    seconds = parse_duration(text)
    if not low <= seconds <= high:
        raise InvalidInput(f"{flag} must be between {span(int(low))} and {span(int(high))}, got {text}")
    return seconds


def bounded_size(flag: str, text: str, low: int, high: int) -> int:
    """A size option's value in bytes (``100M``), refused outside ``[low, high]``."""
    try:
        size = parse_bytes(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{flag}: {exc}") from None
    if not low <= size <= high:
        raise InvalidInput(f"{flag} must be between {low} and {high} bytes, got {text}")
    return size


def networks(flag: str, given: Iterable[str]) -> tuple[str, ...]:
    """Addresses or networks (``10.0.0.5``, ``10.0.0.0/24``, ``::1``), each checked, at most 64."""
    out = []
    for text in given:
        try:
            out.append(str(ipaddress.ip_network(text.strip(), strict=False)))
        except ValueError:
            raise InvalidInput(
                f"{flag} must be an IP address or network (10.0.0.5, 10.0.0.0/24), not {text!r}"
            ) from None
    if len(out) > MAX_NETWORKS:
        raise InvalidInput(f"{flag}: at most {MAX_NETWORKS}, got {len(out)}")
    return tuple(out)

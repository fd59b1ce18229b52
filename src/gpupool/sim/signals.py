"""Energy prices and carbon intensities over time, for the simulator: a constant, 24 hourly
values that repeat each day, or a timestamped series (a step function: each value holds until
the next). Times are the replay's: epoch seconds for dated traces (Philly), whose hour of day is then
UTC's; for the others, seconds from the first submission, which is hour 0 of day 0.

The CSV: ``hour,value`` with hours 0 to 23, once each, or ``time,value`` with ISO 8601 times or
seconds, in order. A header row is allowed. Bad input is one line naming the file and row.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpupool.domain.errors import InvalidInput

HOUR_S = 3600.0
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class Signal:
    """A value per time: ``hourly`` (24 values), else ``times``/``values``, else ``constant``."""

    constant: float = 0.0
    hourly: tuple[float, ...] = ()
    times: tuple[float, ...] = ()
    values: tuple[float, ...] = ()

    @property
    def varies(self) -> bool:
        return len(set(self.hourly or self.values)) > 1

    def at(self, t: float) -> float:
        if self.hourly:
            return self.hourly[int(t % DAY_S // HOUR_S)]
        if self.times:
            return self.values[max(0, bisect.bisect_right(self.times, t) - 1)]
        return self.constant

    def integral(self, t0: float, t1: float) -> float:
        """The value times seconds over [t0, t1]: a step at a time."""
        if not (self.hourly or self.times):
            return self.constant * max(0.0, t1 - t0)
        total, t = 0.0, t0
        while t < t1:
            end = min(t1, self._next_change(t))
            total += self.at(t) * (end - t)
            t = end
        return total

    def _next_change(self, t: float) -> float:
        if self.hourly:
            return (math.floor(t / HOUR_S) + 1) * HOUR_S
        after = bisect.bisect_right(self.times, t)
        return self.times[after] if after < len(self.times) else math.inf


def parse_signal(text: str | None, what: str) -> Signal | None:
    """``0.15`` (a constant) or the path of a CSV (see the module). None: not given."""
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        return read_csv(Path(text), what)
    if value < 0 or not math.isfinite(value):
        raise InvalidInput(f"{what}: {text!r} must be a number >= 0 or a CSV file")
    return Signal(constant=value)


def read_csv(path: Path, what: str) -> Signal:
    if not path.is_file():
        raise InvalidInput(f"{what}: {str(path)[:80]!r} is neither a number nor a CSV file")
    with path.open(newline="") as f:
        rows = [(n, r) for n, r in enumerate(csv.reader(f), start=1) if r and any(c.strip() for c in r)]
    if rows and _number(rows[0][1][-1]) is None and _number(rows[0][1][0]) is None and not _is_time(rows[0][1][0]):
        rows = rows[1:]  # a header
    if not rows:
        raise InvalidInput(f"{what}: {path.name} has no rows (hour,value or time,value)")
    points: list[tuple[float, float]] = []
    for line, row in rows:
        if len(row) != 2:
            raise InvalidInput(f"{what}: {path.name} line {line}: expected 2 columns (hour,value or time,value)")
        value = _number(row[1])
        if value is None or value < 0:
            raise InvalidInput(f"{what}: {path.name} line {line}: {row[1].strip()[:30]!r} is not a number >= 0")
        points.append((_time(row[0], path.name, line, what), value))
    hours = [t for t, _ in points]
    if len(points) == 24 and sorted(hours) == [float(h) for h in range(24)]:
        return Signal(hourly=tuple(v for _, v in sorted(points)))
    if any(b <= a for a, b in itertools.pairwise(hours)):
        raise InvalidInput(f"{what}: {path.name}: give 24 rows hour,value for hours 0-23, or times in increasing order")
    return Signal(times=tuple(hours), values=tuple(v for _, v in points))


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _is_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text.strip())
    except ValueError:
        return False
    return True


def _time(text: str, name: str, line: int, what: str) -> float:
    number = _number(text)
    if number is not None:
        return number
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"{what}: {name} line {line}: {text.strip()[:30]!r} is not an hour, seconds or a time"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()

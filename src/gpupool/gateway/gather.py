"""One load report from several gateway processes (``--processes N``): the head sees the whole
gateway's load each interval, as from one process.

The forked processes do not post to the head: each hands its report (``observe.load_report``'s
dict, counts since its last hand-over) to the first process, which merges the latest of each with
its own at its interval. Per (service, replica):

- ``in_flight`` and ``queued`` are gauges: the first's now plus each process's latest, never a sum
  of old reports (the autoscaler reads them as what runs and waits now);
- ``requests``, ``errors`` and the latency histogram are counts: each report a process handed over
  is added to what is owed exactly once, and what a post took is owed again if the head did not
  take it (as ``observe._undo`` does for the first's own counts).

A (service, replica) listed by any process is listed (the gateway routes to it while one process
does); counts owed for one that no process lists any more are dropped, as one process drops the
counts of a replica that left its table. Pure: no pipe, no clock, no event loop here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str]  # (service, replica)
_ZERO = {"in_flight": 0, "queued": 0, "requests": 0, "errors": 0}


@dataclass(slots=True)
class Counts:
    """What one (service, replica) answered in reports not yet posted; ``latency_counts`` empty
    where no report carried a histogram (a scaled-to-zero service's queued line)."""

    requests: int = 0
    errors: int = 0
    latency_counts: list[int] = field(default_factory=list)
    latency_sum_s: float = 0.0

    def add(self, line: dict[str, Any]) -> None:
        self.requests += int(line.get("requests", 0))
        self.errors += int(line.get("errors", 0))
        counts = line.get("latency_counts")
        if counts:
            if not self.latency_counts:
                self.latency_counts = [0] * len(counts)
            if len(counts) == len(self.latency_counts):  # one binary: the same buckets everywhere
                self.latency_counts = [a + int(b) for a, b in zip(self.latency_counts, counts, strict=True)]
                self.latency_sum_s += float(line.get("latency_sum_s", 0.0))


def owe(owed: dict[Key, Counts], report: dict[str, Any]) -> None:
    """Add one handed-over report's counts to ``owed`` (in place)."""
    for line in report.get("replicas", ()):
        owed.setdefault((line["service"], line["replica"]), Counts()).add(line)


def merge(own: dict[str, Any], latest: Iterable[dict[str, Any]], owed: dict[Key, Counts]) -> dict[str, Any]:
    """The first process's report ``own`` with each other process's ``latest`` report's gauges
    and the counts ``owed`` added: one report as from one process (``own``'s window and buckets).
    ``owed`` is not changed: the caller keeps what a failed post took."""
    lines: dict[Key, dict[str, Any]] = {}
    for line in own["replicas"]:
        lines[(line["service"], line["replica"])] = dict(line)
    for report in latest:
        for line in report.get("replicas", ()):
            key = (line["service"], line["replica"])
            mine = lines.get(key)
            if mine is None:
                mine = lines[key] = {"service": key[0], "replica": key[1], **_ZERO}
            mine["in_flight"] += int(line.get("in_flight", 0))
            mine["queued"] += int(line.get("queued", 0))
    for key, counts in owed.items():
        mine = lines.get(key)
        if mine is None:  # no process lists it now: dropped, as one process drops a gone replica's
            continue
        mine["requests"] += counts.requests
        mine["errors"] += counts.errors
        if counts.latency_counts:
            before = mine.get("latency_counts") or [0] * len(counts.latency_counts)
            if len(before) == len(counts.latency_counts):
                mine["latency_counts"] = [a + b for a, b in zip(before, counts.latency_counts, strict=True)]
                mine["latency_sum_s"] = round(mine.get("latency_sum_s", 0.0) + counts.latency_sum_s, 6)
    return {**own, "replicas": list(lines.values())}


class Gathered:
    """What the first process holds from the others: each one's latest report (by its pipe) and
    the counts owed to the head. Fed from the event loop; read at each report."""

    def __init__(self) -> None:
        self.latest: dict[int, dict[str, Any]] = {}
        self.owed: dict[Key, Counts] = {}

    def take(self, source: int, report: dict[str, Any]) -> None:
        """A report handed over by the process behind ``source``: its gauges replace its last."""
        self.latest[source] = report
        owe(self.owed, report)

    def lost(self, source: int) -> None:
        """That process is gone: what it ran is no longer in flight (its counts owed stay)."""
        self.latest.pop(source, None)

    def report(self, own: dict[str, Any]) -> tuple[dict[str, Any], dict[Key, Counts]]:
        """The merged report to post, and the counts it took (give them back if the post fails)."""
        taken, self.owed = self.owed, {}
        return merge(own, self.latest.values(), taken), taken

    def give_back(self, taken: dict[Key, Counts]) -> None:
        """A post that did not arrive: its counts go into the next one."""
        for key, counts in taken.items():
            self.owed.setdefault(key, Counts()).add(_line(counts))


def _line(counts: Counts) -> dict[str, Any]:
    return {
        "requests": counts.requests,
        "errors": counts.errors,
        "latency_counts": counts.latency_counts,
        "latency_sum_s": counts.latency_sum_s,
    }

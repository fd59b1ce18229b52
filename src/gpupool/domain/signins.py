"""Failed sign-ins, per client address: a burst is slowed down and written to the audit log once.

A burst is a client's failed sign-ins (401s) with less than ``window_s`` between one and the
next. Its first failure is recorded on its own; the rest are counted, and one entry says how many
once the burst has been quiet for ``window_s``: a flood of bad tokens costs the log a line or two,
not a row each. Past ``limit`` failures in a burst the client is answered 429 until the burst has
been quiet for ``window_s`` (each refused try is a failure too, so hammering keeps it refused), as
fail2ban or Slurm's ``MaxAuthFailures``-style limits do. Pure: the time is passed in.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

WINDOW_S = 10.0
LIMIT = 20  # failures in a burst before the address is refused
CLIENTS_KEPT = 10_000
REFUSED = "too_many_failed_sign_ins"  # the 429's code, at the head's door and the gateway's


def refusal(seconds: int) -> str:
    """The 429's message."""
    return f"too many failed sign-ins from this address; try again in {seconds}s with a valid token"


@dataclass
class _Burst:
    started: datetime
    last: datetime
    failures: int = 1
    unrecorded: int = 0  # failures counted, not written one by one
    target: str = ""  # the last one's method and path


@dataclass(frozen=True, slots=True)
class BurstSummary:
    client: str
    started: datetime
    ended: datetime
    unrecorded: int
    last_target: str

    def target(self) -> str:
        seconds = (self.ended - self.started).total_seconds()
        return (
            f"{self.unrecorded} more failed sign-in(s) from this address over {seconds:.0f}s"
            f" (the last: {self.last_target})"
        )


class SignInBursts:
    def __init__(self, window_s: float = WINDOW_S, limit: int = LIMIT, size: int = CLIENTS_KEPT) -> None:
        self.window_s, self.limit, self.size = window_s, limit, size
        self._bursts: OrderedDict[str, _Burst] = OrderedDict()
        self._ended: list[BurstSummary] = []

    def wait_s(self, client: str, now: datetime) -> float | None:
        """How long ``client`` must wait before another try, when its burst is past the limit
        (never with a limit of 0: no limit)."""
        if self.limit <= 0:
            return None
        burst = self._live(client, now)
        if burst is None or burst.failures < self.limit:
            return None
        return max(0.0, self.window_s - (now - burst.last).total_seconds())

    def refuse(self, client: str, now: datetime, target: str) -> int | None:
        """The whole seconds (at least 1) to tell ``client`` to wait when it is past the limit: its
        try is refused and counted as a failure too, so hammering keeps it refused. None: go on."""
        wait = self.wait_s(client, now)
        if wait is None:
            return None
        self.failed(client, now, target)
        return max(1, math.ceil(wait))

    def failed(self, client: str, now: datetime, target: str) -> bool:
        """Note a failed (or refused) sign-in; True when it is the first of a burst: record it."""
        burst = self._live(client, now)
        if burst is None:
            self._bursts[client] = _Burst(now, now, target=target)
            self._bursts.move_to_end(client)
            while len(self._bursts) > self.size:
                self._close(*self._bursts.popitem(last=False))
            return True
        burst.last, burst.target = now, target
        burst.failures += 1
        burst.unrecorded += 1
        self._bursts.move_to_end(client)
        return False

    def ended(self, now: datetime, everything: bool = False) -> list[BurstSummary]:
        """Summaries of the bursts that are over (all of them with ``everything``: at shutdown).
        Bursts are kept in the order of their last failure, so the walk stops at the first one
        still going: a call per request costs the bursts that ended, not all of them."""
        while self._bursts:
            client, burst = next(iter(self._bursts.items()))
            if not everything and (now - burst.last).total_seconds() < self.window_s:
                break
            del self._bursts[client]
            self._close(client, burst)
        out, self._ended = self._ended, []
        return out

    def _live(self, client: str, now: datetime) -> _Burst | None:
        burst = self._bursts.get(client)
        if burst is not None and (now - burst.last).total_seconds() >= self.window_s:
            del self._bursts[client]
            self._close(client, burst)
            return None
        return burst

    def _close(self, client: str, burst: _Burst) -> None:
        if burst.unrecorded:
            self._ended.append(BurstSummary(client, burst.started, burst.last, burst.unrecorded, burst.target))

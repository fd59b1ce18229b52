"""One timer for every request's timeout: a sweep every ``SWEEP_S`` over the requests at a replica.

A timer per request (``loop.call_later`` and its cancel) cost more than a trivial request's whole
bookkeeping; a request that is watched here pays one dict insertion and one removal. The price is
precision: a timeout fires up to ``SWEEP_S`` late, never early (a stream that keeps sending is
never cut short). The sweep runs only while something is watched, so an idle gateway sleeps.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

SWEEP_S = 0.05


class Watched(Protocol):
    def expire(self, now: float) -> None:
        """Called at each sweep: the request checks its own deadline and progress."""


class Sweeper:
    __slots__ = ("_handle", "_watched")

    def __init__(self) -> None:
        self._watched: dict[Watched, None] = {}
        self._handle: asyncio.TimerHandle | None = None

    def watch(self, item: Watched) -> None:
        self._watched[item] = None
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def forget(self, item: Watched) -> None:
        self._watched.pop(item, None)

    def _sweep(self) -> None:
        self._handle = None
        now = time.monotonic()
        try:
            for item in list(self._watched):
                item.expire(now)  # may forget itself (and retry elsewhere, watched anew)
        finally:
            if self._watched:
                self._handle = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

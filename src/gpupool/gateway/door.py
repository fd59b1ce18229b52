"""The gateway's door, as the API's (``api/guard.py``): a client has ``header_s`` to send each
request's head (from its connection, or from the answer before, so an idle keep-alive connection
is closed after as long), ``body_s`` to send its body, and no more than ``max_connections`` are
served at once (the next is answered 503 and closed). Slow headers, slow bodies and thousands of
idle sockets then cost the gateway what they cost the head, and no more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_HEADER_S = 10.0
DEFAULT_BODY_S = 10.0
DEFAULT_MAX_CONNECTIONS = 1000


@dataclass
class Door:
    header_s: float = DEFAULT_HEADER_S
    body_s: float = DEFAULT_BODY_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    open: int = 0  # connections served now
    turned_away: int = 0  # connections answered 503 for the cap, since start
    timed_out: int = 0  # connections closed for a slow head or body, since start

    def admit(self) -> bool:
        """Whether one more connection may be served; it is counted when it may."""
        if self.open >= self.max_connections:
            self.turned_away += 1
            return False
        self.open += 1
        return True

    def left(self) -> None:
        self.open = max(0, self.open - 1)

    def arm(self, seconds: float, then: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(seconds, then)

"""The gateway's decisions, as pure functions: which replica takes a request, what happens to one
no replica can take, whether a failed request is tried again, how long a failing replica rests.

Kept apart from the sockets (as Ray Serve keeps its router's "choose replicas" apart from its
transport) so that each rule is one function with a table of cases in ``tests/gateway/test_gateway_rules.py``.
"""

from __future__ import annotations

import enum
import math
import zlib
from collections.abc import Callable, Sequence

# Methods whose repetition has the same effect as one call (RFC 9110 9.2.2): a request sent to a
# replica that died before answering may be sent to another.
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
MAX_ATTEMPTS = 2  # the first try and one retry on another replica
MAX_CONNECT_ATTEMPTS = 3  # connections refused: nothing was sent, so any method may go elsewhere


class Overflow(enum.Enum):
    QUEUE = "queue"  # wait for a replica's slot, first come first served
    REJECT = "reject"  # 429: every replica is at its cap and the queue is full
    UNAVAILABLE = "unavailable"  # 503: the route has no replica that could take it


def pick_two(loads: Sequence[int], cap: int, draw: Callable[[int], int]) -> int | None:
    """Power of two choices: of two replicas drawn at random among those below ``cap`` in-flight
    requests, the one with fewer (the first drawn on a tie); ``None`` when all are at the cap.

    ``loads`` holds the in-flight count of each replica that may take requests (ejected ones left
    out by the caller); ``draw(n)`` returns a random index in ``range(n)``. Two random choices
    come within a constant of the best replica's load without reading every replica's, and unlike
    "least loaded" they do not send a burst all to the same one.
    """
    n = len(loads)
    if n == 1:
        return 0 if loads[0] < cap else None
    first = draw(n)
    second = draw(n - 1)
    if second >= first:
        second += 1  # two distinct replicas, each pair equally likely
    a, b = loads[first], loads[second]
    if a < cap and (a <= b or b >= cap):
        return first
    if b < cap:
        return second
    free = [i for i, load in enumerate(loads) if load < cap]  # both drawn are full: any other free
    if not free:
        return None
    return free[draw(len(free))] if len(free) > 1 else free[0]


def overflow(replicas: int, queued: int, queue_limit: int, *, waking: bool = False) -> Overflow:
    """What to do with a request no replica can take now: with no replica to wait for it is
    refused at once (503), else it waits in the route's queue while the queue holds fewer than
    ``queue_limit``, else it is refused with 429 and a ``Retry-After``.

    ``waking``: the route is a service scaled to zero (no replica listed at all): the request
    waits for the one its wait makes the autoscaler start; at least one may wait, even with a
    ``queue_limit`` of 0, or the first request could never wake it."""
    if replicas == 0 and not waking:
        return Overflow.UNAVAILABLE
    limit = max(1, queue_limit) if replicas == 0 else queue_limit
    return Overflow.QUEUE if queued < limit else Overflow.REJECT


def retry_after_s(queued: int, replicas: int, max_concurrency: int, timeout_s: float) -> int:
    """Seconds a refused client is asked to wait (``Retry-After``): about how long the queue ahead
    of it takes to drain if each request holds a slot for a tenth of the route's timeout, at least
    one second and at most the timeout. A rough, honest hint; not a promise."""
    slots = max(1, replicas * max_concurrency)
    guess = math.ceil(queued / slots * timeout_s / 10)
    return int(min(max(1, guess), max(1, math.ceil(timeout_s))))


def may_retry(method: str, attempt: int, *, sent: bool, answered: bool, body_replayable: bool) -> bool:
    """Whether a request whose replica failed is sent to another (``attempt`` counts from 0).

    One that was never sent (the connection was refused) may always go elsewhere, up to
    ``MAX_CONNECT_ATTEMPTS`` tries. One that was sent goes again only when the replica sent not a
    byte of its answer (the client saw nothing), the method is idempotent (the replica may have
    acted on it before dying), the body can be sent again (small enough to have been kept), and
    this was the first attempt.
    """
    if not sent:
        return attempt + 1 < MAX_CONNECT_ATTEMPTS
    return not answered and method in IDEMPOTENT and body_replayable and attempt + 1 < MAX_ATTEMPTS


def ejection_s(failures: int, base_s: float, most_s: float) -> float:
    """How long a replica that refused or dropped connections ``failures`` times in a row is left
    out: ``base_s``, doubling with each further failure, at most ``most_s``."""
    return float(min(most_s, base_s * 2 ** max(0, min(failures - 1, 30))))


def share(total: int, key: str, index: int, count: int) -> int:
    """Process ``index``'s part of ``total`` slots when ``count`` gateway processes serve one port
    (``--processes``): ``total // count``, and one more for ``total % count`` of them, so the parts
    add up to ``total`` exactly and a replica's cap holds across processes without any shared
    state. Which processes get the extra slot turns with ``key`` (a stable CRC, not Python's
    salted ``hash``: every process must compute the same), so replicas capped below ``count`` are
    spread over the processes instead of all falling to the first ones."""
    if count <= 1:
        return total
    turn = (index - zlib.crc32(key.encode())) % count
    return total // count + (1 if turn < total % count else 0)

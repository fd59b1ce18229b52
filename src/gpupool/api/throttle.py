"""Failed sign-ins slowed down per client address (``domain/signins.py``): an address past the
limit of failed sign-ins in a burst gets 429 ``too_many_failed_sign_ins`` (with ``Retry-After``)
without its token being looked up, until it has been quiet for the window. A token that worked in
the last ``GOOD_FOR_S`` still passes (its hash is kept, never the token), so the people behind the
same address as an attacker, who were using gpupool, go on using it."""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.clock import Clock
from gpupool.domain.signins import REFUSED, SignInBursts, refusal

GOOD_FOR_S = 600.0
GOOD_KEPT = 10_000
# The gateway asks about its callers' tokens from its own address: it limits its callers itself.
UNTHROTTLED = frozenset({"/api/v1/gateway/authorize"})


class SignInThrottle:
    def __init__(self, app: ASGIApp, bursts: SignInBursts, clock: Clock) -> None:
        self.app, self.bursts, self.clock = app, bursts, clock
        self._good: OrderedDict[bytes, float] = OrderedDict()  # a working token's hash -> when it last worked

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.bursts.limit <= 0 or scope["path"] in UNTHROTTLED:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        address = str(client[0]) if client else "-"
        token = _token(scope)
        # Only a token costs a look-up: a request without one (a public page, or a plain 401) passes.
        seconds = (
            self.bursts.refuse(address, self.clock.now(), f"{scope['method']} {scope['path']}")
            if token is not None and not self._worked(token)
            else None
        )
        if seconds is not None:
            body = json.dumps({"code": REFUSED, "message": refusal(seconds)}).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(seconds).encode()),
            ]
            await send({"type": "http.response.start", "status": 429, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if token is None:
            await self.app(scope, receive, send)
            return

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] not in (401, 429):
                self._remember(token)
            await send(message)

        await self.app(scope, receive, noting)

    def _worked(self, token: bytes | None) -> bool:
        if token is None:
            return False
        seen = self._good.get(hashlib.sha256(token).digest())
        return seen is not None and time.monotonic() - seen < GOOD_FOR_S

    def _remember(self, token: bytes) -> None:
        key = hashlib.sha256(token).digest()
        self._good[key] = time.monotonic()
        self._good.move_to_end(key)
        while len(self._good) > GOOD_KEPT:
            self._good.popitem(last=False)


def _token(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() or None if scheme.lower() == b"bearer" else None
    return None

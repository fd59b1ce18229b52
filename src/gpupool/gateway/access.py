"""Whether a caller's token may use a route, as the head says (``GET /api/v1/gateway/authorize``),
remembered for a few seconds.

The gateway holds no user or token data: the head alone knows tokens, users and project members.
Asking it once per request would put the head back on every request's path, so answers are kept
``ttl_s`` (a revoked token or a removed member stops working within that time, as the head's own
token cache does within a second) in a bounded map, and concurrent requests with the same token
share one question. A yes names the caller (``X-Gpupool-User``), which the replica is told.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from gpupool.gateway.pool import Refused
from gpupool.gateway.routes import Route

PATH = "/api/v1/gateway/authorize"
USER_HEADER = "X-Gpupool-User"  # on the head's yes: whose token it is
MISSING = "missing token: send Authorization: Bearer <a gpupool token> (gpupool login prints one)"


class Access:
    def __init__(self, client: httpx.AsyncClient, ttl_s: float = 5.0, size: int = 4096) -> None:
        self._client = client
        self._ttl, self._size = ttl_s, size
        self._answers: dict[tuple[str, str, int | None], tuple[float, Refused | str]] = {}
        self._asking: dict[tuple[str, str, int | None], asyncio.Future[Refused | str]] = {}

    def approved(self, token: str | None, route: Route) -> str | None:
        """The caller's name where a fresh answer of the head lets ``token`` call ``route``: then the
        request goes on without a task; else None (no answer, a stale one, a refusal): ``check``."""
        if token is None:
            return None
        answer = self._answers.get((token, route.project, route.job_id))
        if answer is None or isinstance(answer[1], Refused) or answer[0] <= time.monotonic():
            return None
        return answer[1]

    async def check(self, token: str | None, route: Route | None) -> str:
        """The caller's name if ``token`` may call ``route`` (``None``: any valid user's token, for
        ``/metrics``); raise ``Refused`` (401, 403, or 503 when the head cannot say) if not."""
        if token is None:
            raise Refused(401, "unauthorized", MISSING)
        key = (token, route.project if route else "", route.job_id if route else None)
        answer = self._answers.get(key)
        if answer is not None and answer[0] > time.monotonic():
            if isinstance(answer[1], Refused):
                raise Refused(answer[1].status, answer[1].code, answer[1].message)  # a fresh one: no shared traceback
            return answer[1]
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.get_running_loop().create_future()
            self._asking[key] = asking
            try:
                verdict = await self._ask(token, route)
                self._remember(key, verdict)
                asking.set_result(verdict)
            except Refused as e:  # the head could not answer: said to everyone waiting, not kept
                asking.set_exception(e)
                asking.exception()  # retrieved here: else, with no one else waiting, asyncio warns
                raise
            finally:
                self._asking.pop(key, None)
                if not asking.done():
                    asking.cancel()
        else:
            verdict = await asyncio.shield(asking)
        if isinstance(verdict, Refused):
            raise Refused(verdict.status, verdict.code, verdict.message)
        return verdict

    async def _ask(self, token: str, route: Route | None) -> Refused | str:
        params: dict[str, str | int] = {}
        if route is not None:
            params["project"] = route.project
            if route.job_id is not None:
                params["job"] = route.job_id
        try:
            response = await self._client.get(PATH, params=params, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as e:
            raise Refused(503, "head_unreachable", f"cannot check the token: head unreachable ({e!r})") from None
        if response.status_code == 204:
            return str(response.headers.get(USER_HEADER, ""))
        if response.status_code in (401, 403, 404):
            code, message = _error(response)
            return Refused(401 if response.status_code == 401 else 403, code, message)
        raise Refused(503, "head_error", f"cannot check the token: head answered {response.status_code}")

    def _remember(self, key: tuple[str, str, int | None], verdict: Refused | str) -> None:
        if len(self._answers) >= self._size:
            now = time.monotonic()
            self._answers = {k: v for k, v in self._answers.items() if v[0] > now}
            if len(self._answers) >= self._size:
                self._answers.clear()
        self._answers[key] = (time.monotonic() + self._ttl, verdict)


def _error(response: httpx.Response) -> tuple[str, str]:
    try:
        body = response.json()
        return str(body.get("code", "forbidden")), str(body.get("message", response.text[:200]))
    except ValueError:
        return "forbidden", response.text[:200]

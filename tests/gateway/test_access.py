"""Who may call a route through the gateway: the head decides (a fake head here, answering as the
real one's /api/v1/gateway/authorize does), the gateway remembers, and the caller's token never
reaches a replica, public or not: a checked caller is named to it instead, and a client's own claim
to a name is dropped."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs, urlsplit

import httpx

from gpupool.gateway.access import Access
from tests.gateway.replicas import Call, Replica, gateway, route, run

# token -> projects whose routes it may use; any listed token is a valid user's
TOKENS = {"max-token": {"lab"}, "kim-token": {"vision"}}
USERS = {"max-token": "max", "kim-token": "kim"}


def _fake_head() -> tuple[Replica, list[dict[str, list[str]]]]:
    asked: list[dict[str, list[str]]] = []

    async def authorize(call: Call) -> None:
        url = urlsplit(call.seen.target)
        query = parse_qs(url.query)
        asked.append(query)
        token = call.seen.headers.get("authorization", "").removeprefix("Bearer ")
        if url.path != "/api/v1/gateway/authorize" or token not in TOKENS:
            call.respond(401, json.dumps({"code": "unauthorized", "message": "invalid token"}).encode())
        elif "project" in query and query["project"][0] not in TOKENS[token]:
            call.respond(403, json.dumps({"code": "not_a_member", "message": "not lab's"}).encode())
        else:
            call.respond(204, headers={"X-Gpupool-User": USERS[token]})

    return Replica("head", authorize), asked


def test_members_pass_others_are_refused_and_answers_are_kept() -> None:
    async def scenario() -> None:
        head, asked = _fake_head()
        await head.start()
        a = await Replica("a").start()
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{head.port}")
        gw = await gateway(route("svc", [a], public=False), route("open", [a], public=True), access=Access(client))

        def bearer(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}"}

        missing = await gw.http.get("/svc/")
        assert missing.status_code == 401 and missing.json()["code"] == "unauthorized"
        assert (await gw.http.get("/svc/", headers=bearer("forged"))).status_code == 401
        other = await gw.http.get("/svc/", headers=bearer("kim-token"))
        assert other.status_code == 403 and other.json()["code"] == "not_a_member"
        forged = {"X-Gpupool-User": "admin", "X-Gpupool-Project": "root-stuff"}
        member = await gw.http.get("/svc/x", headers={**bearer("max-token"), **forged})
        assert member.status_code == 200
        seen = member.json()["headers"]
        assert "authorization" not in seen  # the caller's token stays here
        assert (seen["x-gpupool-user"], seen["x-gpupool-project"]) == (
            "max",
            "lab",
        )  # the gateway's word, not the client's
        public = (await gw.http.get("/open/", headers={**bearer("anything"), **forged})).json()["headers"]
        assert not {"authorization", "x-gpupool-user", "x-gpupool-project"} & set(public)  # unchecked: unnamed
        assert asked[-1] == {"project": ["lab"]}
        before = len(asked)
        burst = await asyncio.gather(*[gw.http.get("/svc/", headers=bearer("max-token")) for _ in range(10)])
        refused = await gw.http.get("/svc/", headers=bearer("kim-token"))
        assert [r.status_code for r in burst] == [200] * 10 and refused.status_code == 403
        assert {r.json()["headers"]["x-gpupool-user"] for r in burst} == {"max"}  # named from the kept answer too
        assert len(asked) == before  # kept: neither the burst nor the refusal asked again
        metrics = await gw.http.get("/metrics", headers=bearer("kim-token"))
        assert metrics.status_code == 200 and asked[-1] == {}  # any user's token may read /metrics
        assert (await gw.http.get("/metrics")).status_code == 401
        await client.aclose()

    run(scenario)


def test_a_head_that_cannot_answer_gets_503_and_no_head_means_only_public_routes() -> None:
    async def scenario() -> None:
        a = await Replica("a").start()
        down = await Replica("down").start()
        down.kill()
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{down.port}")
        gw = await gateway(route("svc", [a], public=False), access=Access(client))
        got = await gw.http.get("/svc/", headers={"Authorization": "Bearer max-token"})
        assert got.status_code == 503 and got.json()["code"] == "head_unreachable"
        static = await gateway(route("svc", [a], public=False), route("open", [a]))
        assert (await static.http.get("/svc/", headers={"Authorization": "Bearer x"})).status_code == 403
        assert (await static.http.get("/open/")).status_code == 200
        await client.aclose()

    run(scenario)


def test_an_address_guessing_tokens_is_slowed_at_the_gateway_too() -> None:
    """The head sees the gateway's address only: the gateway counts its callers' failed sign-ins
    itself, and past the limit answers 429 without asking the head (one it approved lately passes)."""
    from gpupool.domain.signins import LIMIT

    async def scenario() -> None:
        head, asked = _fake_head()
        await head.start()
        a = await Replica("a").start()
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{head.port}")
        gw = await gateway(route("svc", [a], public=False), access=Access(client))
        answers = [
            (await gw.http.get("/svc/", headers={"Authorization": f"Bearer guess-{i}"})).status_code
            for i in range(LIMIT + 5)
        ]
        assert answers[:LIMIT] == [401] * LIMIT and set(answers[LIMIT:]) == {429}
        assert len(asked) == LIMIT  # the refused ones never reached the head
        refused = await gw.http.get("/svc/", headers={"Authorization": "Bearer guess-more"})
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        await client.aclose()

    run(scenario)


def test_guessing_tokens_at_the_metrics_page_is_slowed_too() -> None:
    """``/metrics`` asks the head about a token as a route does: the same limit holds there."""
    from gpupool.domain.signins import LIMIT

    async def scenario() -> None:
        head, asked = _fake_head()
        await head.start()
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{head.port}")
        gw = await gateway(access=Access(client))
        answers = [
            (await gw.http.get("/metrics", headers={"Authorization": f"Bearer guess-{i}"})).status_code
            for i in range(LIMIT + 5)
        ]
        assert answers[:LIMIT] == [401] * LIMIT and set(answers[LIMIT:]) == {429}
        assert len(asked) == LIMIT
        await client.aclose()

    run(scenario)


def test_a_sign_in_limit_of_0_is_no_limit_and_ended_bursts_are_let_go() -> None:
    """``--sign-in-limit 0`` (the head's, passed on) never answers 429; with a limit, a burst that
    is over is let go at the next check instead of being kept for ever."""
    from datetime import UTC, datetime

    from gpupool.domain.signins import LIMIT

    async def scenario() -> None:
        head, asked = _fake_head()
        await head.start()
        a = await Replica("a").start()
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{head.port}")
        unlimited = await gateway(route("svc", [a], public=False), access=Access(client, ttl_s=0), sign_in_limit=0)
        answers = [
            (await unlimited.http.get("/svc/", headers={"Authorization": f"Bearer guess-{i}"})).status_code
            for i in range(LIMIT + 5)
        ]
        assert set(answers) == {401} and len(asked) == LIMIT + 5

        gw = await gateway(route("svc", [a], public=False), access=Access(client, ttl_s=0))
        gw.gateway.signins.window_s = 0.2
        for i in range(3):
            assert (await gw.http.get("/svc/", headers={"Authorization": f"Bearer more-{i}"})).status_code == 401
        await asyncio.sleep(0.3)  # the burst is over
        assert (await gw.http.get("/svc/", headers={"Authorization": "Bearer later"})).status_code == 401
        assert gw.gateway.signins.ended(datetime.now(UTC)) == []  # its summary was let go at that check
        await client.aclose()

    run(scenario)

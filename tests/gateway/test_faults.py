"""Replicas that die: an idempotent request whose replica died before answering goes to another,
a non-idempotent one gets 502, a refused connection goes elsewhere whatever the method, the dead
replica is left out at once, and no request hangs (each scenario has a hard limit)."""

from __future__ import annotations

import asyncio

from gpupool.gateway.door import Door
from tests.gateway.replicas import Call, Replica, gateway, route, run, until


async def _dies(call: Call) -> None:
    call.die()


def test_an_idempotent_request_is_retried_on_another_replica_and_a_post_is_not() -> None:
    async def scenario() -> None:
        dead, good = await Replica("dead", _dies).start(), await Replica("good").start()
        gw = await gateway(route("svc", [dead, good]), first=True)  # the first try goes to "dead"
        got = await gw.http.get("/svc/x")
        assert got.status_code == 200 and got.json()["replica"] == "good"
        state = gw.table.routes["svc"]
        assert state.retries == 1 and state.replicas[0].stats.errors == {"reset": 1}
        assert [r.replica for r in [state.replicas[0].endpoint]] == ["dead"]
        assert state.replicas[0].ejected_until > 0  # left out: the next requests go to "good" only
        assert {(await gw.http.put("/svc/y", content=b"z")).json()["replica"] for _ in range(3)} == {"good"}

        gw2 = await gateway(route("svc", [dead, good]), first=True)
        posted = await gw2.http.post("/svc/x", content=b"once")
        assert posted.status_code == 502 and posted.json()["code"] == "replica_failed"
        assert [s.method for s in good.seen].count("POST") == 0  # never sent twice

    run(scenario)


def test_a_refused_connection_goes_to_another_replica_whatever_the_method() -> None:
    async def scenario() -> None:
        gone, good = await Replica("gone").start(), await Replica("good").start()
        gone.kill()  # its port is closed: nothing was sent, so a POST may go elsewhere too
        gw = await gateway(route("svc", [gone, good]), first=True)
        posted = await gw.http.post("/svc/x", content=b"once")
        assert posted.status_code == 200 and posted.json()["replica"] == "good"
        assert gw.table.routes["svc"].replicas[0].stats.errors == {"connect": 1}

    run(scenario)


def test_killing_a_replica_mid_load_retries_what_it_held_and_fails_none_that_may_not_be() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def hold(call: Call) -> None:
            await release.wait()
            call.respond(200, call.replica.name.encode())

        a = await Replica("a", hold).start()
        b = await Replica("b", hold).start()
        gw = await gateway(route("svc", [a, b], max_concurrency=50, queue_limit=100))
        gets = [asyncio.create_task(gw.http.get(f"/svc/{i}")) for i in range(20)]
        posts = [asyncio.create_task(gw.http.post(f"/svc/{i}", content=b"p")) for i in range(10)]
        await until(lambda: a.in_flight + b.in_flight == 30)
        held_by_a = a.in_flight
        posts_at_a = sum(1 for s in a.seen if s.method == "POST")
        assert held_by_a > 0  # two random choices spread 30 requests over both
        a.kill()
        await until(lambda: b.in_flight == 30 - posts_at_a)  # a's GETs moved to b
        release.set()
        got = [r.status_code for r in await asyncio.gather(*gets)]
        posted = [r.status_code for r in await asyncio.gather(*posts)]
        assert got == [200] * 20
        assert sorted(posted) == [200] * (10 - posts_at_a) + [502] * posts_at_a
        assert gw.table.routes["svc"].replicas[0].ejected_until > 0
        assert (await gw.http.get("/svc/after")).text == "b"

    run(scenario)


def test_a_replica_that_dies_mid_answer_closes_the_client_connection() -> None:
    async def scenario() -> None:
        async def half(call: Call) -> None:
            call.start_chunks()
            call.chunk(b"partial")
            await call.writer.drain()
            call.die()

        a, b = await Replica("a", half).start(), await Replica("b").start()
        gw = await gateway(route("svc", [a, b]), first=True)
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        writer.write(b"GET /svc/x HTTP/1.1\r\nHost: x\r\n\r\n")
        got = await reader.read()  # until the gateway closes: the answer cannot end properly
        assert got.startswith(b"HTTP/1.1 200") and b"partial" in got and not got.endswith(b"0\r\n\r\n")
        assert b.seen == []  # the client saw a byte: never retried
        writer.close()

    run(scenario)


def test_a_body_that_stops_coming_is_cut_off_with_408_and_its_slot_let_go() -> None:
    """The door's body clock (gateway/door.py): a client that sends half a body and waits holds a
    replica's slot no longer than the body timeout."""

    async def scenario() -> None:
        async def reads_all(call: Call) -> None:
            call.respond(200, call.seen.body)  # the replica answers once the whole body is in

        a = await Replica("a", reads_all).start()
        gw = await gateway(route("svc", [a]), door=Door(body_s=0.3))
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        writer.write(b"POST /svc/x HTTP/1.1\r\nHost: g\r\nContent-Length: 100\r\n\r\n{")  # never the rest
        said = await reader.read(4096)
        assert said.startswith(b"HTTP/1.1 408") and b"body_timeout" in said, said
        writer.close()
        await until(lambda: gw.table.routes["svc"].replicas[0].in_flight == 0)
        await until(lambda: gw.gateway.door.open == 0)  # once its lingering close is done
        assert gw.gateway.door.timed_out == 1
        await gw.close()

    run(scenario)


def test_a_long_upload_that_keeps_coming_is_not_cut_off() -> None:
    """The body clock bounds a silence, not the whole upload: a body sent in pieces, each well
    within the timeout, takes several times the timeout in all and still gets through."""

    async def scenario() -> None:
        async def reads_all(call: Call) -> None:
            call.respond(200, call.seen.body)

        a = await Replica("a", reads_all).start()
        gw = await gateway(route("svc", [a]), door=Door(body_s=1.0))
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        writer.write(b"POST /svc/x HTTP/1.1\r\nHost: g\r\nContent-Length: 12\r\n\r\n")
        for piece in (b"ab", b"cd", b"ef", b"gh", b"ij", b"kl"):  # 3 s in all
            await asyncio.sleep(0.5)
            writer.write(piece)
        said = await reader.read(4096)
        assert said.startswith(b"HTTP/1.1 200") and said.endswith(b"abcdefghijkl"), said
        writer.close()
        await gw.close()

    run(scenario)


def test_a_body_held_while_its_request_waits_in_the_queue_is_not_the_clients_delay() -> None:
    """A request queued behind a busy replica holds its body and stops reading the client past
    HOLD_BYTES: the body clock stops with it, so the client is not cut off for the gateway's wait."""
    from gpupool.gateway.request import HOLD_BYTES

    async def scenario() -> None:
        busy = asyncio.Event()
        release = asyncio.Event()

        async def hold_first(call: Call) -> None:
            if call.seen.target == "/first":
                busy.set()
                await release.wait()
            call.respond(200, str(len(call.seen.body)).encode())

        a = await Replica("a", hold_first).start()
        gw = await gateway(route("svc", [a], max_concurrency=1, queue_limit=4), door=Door(body_s=0.3))
        first = asyncio.create_task(gw.http.get("/svc/first"))
        await busy.wait()
        size = 4 * HOLD_BYTES
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        writer.write(b"POST /svc/second HTTP/1.1\r\nHost: g\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)
        await asyncio.sleep(1.0)  # over three body timeouts in the queue
        release.set()
        said = await reader.read(4096)
        assert said.startswith(b"HTTP/1.1 200") and said.endswith(str(size).encode()), said
        assert (await first).status_code == 200
        writer.close()
        await gw.close()

    run(scenario)


def test_a_pipelined_request_gets_the_rest_of_its_body_once_its_turn_comes() -> None:
    """Reading stops while a pipelined request waits its turn; when its turn comes reading
    resumes, so the rest of its body arrives (it used to stay unread until the body timeout)."""

    async def scenario() -> None:
        a = await Replica("a").start()
        gw = await gateway(route("svc", [a]), door=Door(body_s=5.0))
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        writer.write(
            b"GET /svc/one HTTP/1.1\r\nHost: g\r\n\r\n"
            b"POST /svc/two HTTP/1.1\r\nHost: g\r\nContent-Length: 6\r\nConnection: close\r\n\r\nabc"
        )
        await until(lambda: len(a.seen) == 1)
        await asyncio.sleep(0.2)  # the first is answered: the second is started, its body short
        writer.write(b"def")
        said = await asyncio.wait_for(reader.read(), timeout=3.0)
        assert said.count(b"HTTP/1.1 200") == 2 and b'"body": "abcdef"' in said, said
        writer.close()
        await gw.close()

    run(scenario)

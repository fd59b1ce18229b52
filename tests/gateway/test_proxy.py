"""The gateway end to end on real sockets: routing, headers, the cap, the queue and 429, streaming
both ways, timeouts, limits at the door, a WebSocket tunnel, /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json

from gpupool.gateway import observe
from gpupool.gateway.pool import BUCKETS
from tests.gateway.replicas import Call, Replica, gateway, route, run, until


def test_routes_by_prefix_and_strips_a_services_but_not_a_jobs() -> None:
    async def scenario() -> None:
        a, b = await Replica("a").start(), await Replica("b").start()
        gw = await gateway(route("llm", [a]), route("jobs/7", [b]))
        got = await gw.http.get("/llm/v1/complete?x=1&y=2", headers={"Authorization": "Bearer public-ok"})
        assert got.status_code == 200
        doc = got.json()
        assert (doc["replica"], doc["method"], doc["target"]) == ("a", "GET", "/v1/complete?x=1&y=2")
        assert doc["headers"]["x-forwarded-for"] == "127.0.0.1"
        assert doc["headers"]["x-forwarded-proto"] == "http"
        assert doc["headers"]["x-forwarded-prefix"] == "/llm"
        assert "authorization" not in doc["headers"]  # a gpupool token never reaches a replica, public or not
        assert (await gw.http.get("/llm")).json()["target"] == "/"
        job = (await gw.http.get("/jobs/7/lab/tree")).json()
        # a job's port keeps the prefix (a notebook serves under its base URL), and is told no
        # prefix was taken off
        assert (job["target"], job["replica"]) == ("/jobs/7/lab/tree", "b")
        assert "x-forwarded-prefix" not in job["headers"]
        missing = await gw.http.get("/jobs/8/x")
        assert missing.status_code == 404 and missing.json()["code"] == "no_route"
        assert (await gw.http.get("/nope/x")).status_code == 404
        await gw.close()

    run(scenario)


def test_hop_by_hop_headers_stay_behind_and_forwarded_for_grows() -> None:
    async def scenario() -> None:
        a = await Replica("a").start()
        gw = await gateway(route("svc", [a]))
        sent = {
            "Connection": "keep-alive, X-Secret-Hop",
            "X-Secret-Hop": "1",
            "TE": "trailers",
            "X-Forwarded-For": "10.0.0.9",
        }
        got = (await gw.http.post("/svc/p", content=b"hello", headers=sent)).json()
        assert "x-secret-hop" not in got["headers"] and "te" not in got["headers"]
        assert got["headers"]["x-forwarded-for"] == "10.0.0.9, 127.0.0.1"
        assert got["body"] == "hello"
        await gw.close()

    run(scenario)


def _holding(release: asyncio.Event) -> object:
    async def hold(call: Call) -> None:
        await release.wait()
        call.respond(200, call.replica.name.encode())

    return hold


def test_each_replica_gets_at_most_its_cap_then_the_queue_then_429() -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        a = await Replica("a", _holding(release)).start()  # type: ignore[arg-type]
        gw = await gateway(route("svc", [a], max_concurrency=2, queue_limit=1))
        state = gw.table.routes["svc"]
        first = [asyncio.create_task(gw.http.get("/svc/")) for _ in range(2)]
        await until(lambda: a.in_flight == 2)
        queued = asyncio.create_task(gw.http.get("/svc/"))
        await until(lambda: len(state.queue) == 1)
        refused = await gw.http.get("/svc/")
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["code"] == "overloaded"
        release.set()
        answers = await asyncio.gather(*first, queued)
        assert [r.status_code for r in answers] == [200, 200, 200]
        assert a.most_in_flight == 2 and len(a.seen) == 3
        text = observe.render(observe.registry(gw.table, gw.gateway)).decode()
        assert 'gpupool_gateway_requests_total{code="4xx",replica="",route="svc"} 1.0' in text
        assert 'gpupool_gateway_requests_total{code="2xx",replica="a",route="svc"} 3.0' in text
        await gw.close()

    run(scenario)


def test_two_choices_fill_the_free_replica_when_one_is_at_its_cap() -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        a = await Replica("a", _holding(release)).start()  # type: ignore[arg-type]
        b = await Replica("b", _holding(release)).start()  # type: ignore[arg-type]
        gw = await gateway(route("svc", [a, b], max_concurrency=1, queue_limit=0), first=True)
        held = [asyncio.create_task(gw.http.get("/svc/")) for _ in range(2)]
        await until(lambda: a.in_flight + b.in_flight == 2)
        assert (a.in_flight, b.in_flight) == (1, 1)
        assert (await gw.http.get("/svc/")).status_code == 429  # no queue at all
        release.set()
        assert sorted(r.text for r in await asyncio.gather(*held)) == ["a", "b"]
        await gw.close()

    run(scenario)


def test_a_request_queued_past_its_timeout_gets_503_and_leaves_the_queue() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def trickle(call: Call) -> None:  # busy, but never silent for a whole timeout
            call.start_chunks()
            while not release.is_set():
                call.chunk(b".")
                await call.writer.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), 0.02)
            call.end_chunks()

        a = await Replica("a", trickle).start()
        gw = await gateway(route("svc", [a], max_concurrency=1, queue_limit=4, timeout_s=0.2))
        held = asyncio.create_task(gw.http.get("/svc/"))
        await until(lambda: a.in_flight == 1)
        late = await gw.http.get("/svc/")
        assert late.status_code == 503 and late.json()["code"] == "queue_timeout"
        assert len(gw.table.routes["svc"].queue) == 0
        release.set()
        assert (await held).status_code == 200
        await gw.close()

    run(scenario)


def test_a_replica_that_never_answers_gets_504_and_frees_its_slot() -> None:
    async def scenario() -> None:
        never = asyncio.Event()
        a = await Replica("a", _holding(never)).start()  # type: ignore[arg-type]
        gw = await gateway(route("svc", [a], max_concurrency=1, timeout_s=0.2))
        got = await gw.http.get("/svc/")
        assert got.status_code == 504 and got.json()["code"] == "replica_timeout"
        assert gw.table.routes["svc"].replicas[0].in_flight == 0
        await gw.close()

    run(scenario)


def test_a_timed_out_request_is_not_retried_for_its_deadline_is_spent() -> None:
    """A retry after the whole deadline had no time to connect: on a busy machine the client got
    a 502 (unreachable) for what was a timeout, and a second replica was held for nothing."""

    async def scenario() -> None:
        never = asyncio.Event()
        a = await Replica("a", _holding(never)).start()  # type: ignore[arg-type]
        b = await Replica("b", _holding(never)).start()  # type: ignore[arg-type]
        gw = await gateway(route("svc", [a, b], max_concurrency=1, timeout_s=0.2), first=True)
        got = await gw.http.get("/svc/")
        assert got.status_code == 504 and got.json()["code"] == "replica_timeout"
        assert (len(a.seen), len(b.seen)) == (1, 0)
        await gw.close()

    run(scenario)


def test_chunked_and_sse_answers_arrive_piece_by_piece() -> None:
    """The replica sends its last piece only after the client has read the first: a gateway that
    buffered the answer would never deliver the first, and the scenario's limit would fail it."""

    async def scenario() -> None:
        told = asyncio.Event()

        async def stream(call: Call) -> None:
            sse = call.seen.target == "/events"
            call.start_chunks("text/event-stream" if sse else "text/plain")
            call.chunk(b"data: one\n\n" if sse else b"first ")
            await call.writer.drain()
            await told.wait()
            told.clear()
            call.chunk(b"data: two\n\n" if sse else b"last")
            call.end_chunks()

        a = await Replica("a", stream).start()
        gw = await gateway(route("svc", [a]))
        for path, first, whole in [
            ("/svc/text", b"first ", b"first last"),
            ("/svc/events", b"data: one\n\n", b"data: one\n\ndata: two\n\n"),
        ]:
            async with gw.http.stream("GET", path) as response:
                assert response.headers["transfer-encoding"] == "chunked"
                pieces = response.aiter_raw()
                got = await anext(pieces)
                assert got == first
                told.set()
                rest = b"".join([p async for p in pieces])
                assert got + rest == whole
        await gw.close()

    run(scenario)


def test_a_request_body_streams_to_the_replica_before_it_is_whole() -> None:
    async def scenario() -> None:
        seen_first = asyncio.Event()
        go_on = asyncio.Event()

        async def reader(call: Call) -> None:
            call.respond(200, call.seen.body)

        a = await Replica("a", reader).start()
        gw = await gateway(route("svc", [a]))
        original = a._serve

        async def spy(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            first = await r.read(65536)  # the head and the first chunk
            assert b"part-one" in first
            seen_first.set()
            r._buffer[:0] = first  # type: ignore[attr-defined]  # put it back for the real server
            await original(r, w)

        a.server.close()  # type: ignore[union-attr]
        a.server = await asyncio.start_server(spy, "127.0.0.1", a.port)

        async def body():  # type: ignore[no-untyped-def]
            yield b"part-one,"
            await seen_first.wait()
            go_on.set()
            yield b"part-two"

        got = await gw.http.post("/svc/up", content=body())
        assert got.status_code == 200 and got.content == b"part-one,part-two"
        assert go_on.is_set()
        await gw.close()

    run(scenario)


def test_bodies_past_the_cap_get_413() -> None:
    async def scenario() -> None:
        a = await Replica("a").start()
        gw = await gateway(route("svc", [a]), max_body=1000)
        assert (await gw.http.post("/svc/", content=b"x" * 1000)).status_code == 200
        big = await gw.http.post("/svc/", content=b"x" * 1001)
        assert big.status_code == 413 and big.json()["code"] == "body_too_large"

        async def chunks():  # type: ignore[no-untyped-def]
            for _ in range(4):
                yield b"y" * 400

        streamed = await gw.http.post("/svc/", content=chunks())
        assert streamed.status_code == 413
        await gw.close()

    run(scenario)


def test_a_websocket_upgrade_becomes_a_tunnel() -> None:
    async def scenario() -> None:
        async def upgrade(call: Call) -> None:
            call.writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            reader_pipe = call.writer.transport.get_protocol()._stream_reader  # type: ignore[attr-defined]
            while data := await reader_pipe.read(1024):
                call.writer.write(b"echo:" + data)
                await call.writer.drain()

        a = await Replica("a", upgrade).start()
        gw = await gateway(route("jobs/3", [a]))
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        writer.write(b"GET /jobs/3/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101") and b"upgrade: websocket" in head.lower()
        writer.write(b"ping")
        assert await reader.readexactly(9) == b"echo:ping"
        writer.close()
        await gw.close()

    run(scenario)


def test_metrics_and_health_pages() -> None:
    async def scenario() -> None:
        a = await Replica("a").start()
        gw = await gateway(route("svc", [a]))
        gw.gateway._metrics = lambda: observe.render(observe.registry(gw.table, gw.gateway))
        assert (await gw.http.get("/svc/")).status_code == 200
        health = await gw.http.get("/-/healthz")
        assert health.json() == {"status": "ok", "routes": 1}
        text = (await gw.http.get("/metrics")).text
        assert 'gpupool_gateway_in_flight{replica="a",route="svc"} 0.0' in text
        assert 'gpupool_gateway_request_duration_seconds_count{replica="a",route="svc"} 1.0' in text
        report = observe.load_report(gw.table, 1.0)
        line = dict(report["replicas"][0])
        counts, took = line.pop("latency_counts"), line.pop("latency_sum_s")
        assert line == {"service": "svc", "replica": "a", "in_flight": 0, "queued": 0, "requests": 1, "errors": 0}
        assert report["window_s"] == 1.0 and report["latency_bounds"] == list(BUCKETS)
        assert sum(counts) == 1 and len(counts) == len(BUCKETS) + 1 and took > 0
        observe._undo(gw.table, report)  # the head did not take it: the next report carries it all again
        resent = observe.load_report(gw.table, 1.0)["replicas"][0]
        assert (resent["requests"], resent["latency_counts"], resent["latency_sum_s"]) == (1, counts, took)
        again = observe.load_report(gw.table, 1.0)["replicas"][0]
        assert (again["requests"], sum(again["latency_counts"]), again["latency_sum_s"]) == (0, 0, 0)  # counted once
        assert json.loads(json.dumps(report)) == report
        await gw.close()

    run(scenario)


def test_a_new_table_takes_effect_and_keeps_replicas_listed_in_both() -> None:
    async def scenario() -> None:
        a, b = await Replica("a").start(), await Replica("b").start()
        gw = await gateway(route("svc", [a, b]))
        before = gw.table.routes["svc"].replicas[1]
        gw.apply(route("svc", [b]))
        assert gw.table.routes["svc"].replicas == [before]
        assert {(await gw.http.get("/svc/")).json()["replica"] for _ in range(6)} == {"b"}
        gw.apply()
        assert (await gw.http.get("/svc/")).status_code == 404
        await gw.close()

    run(scenario)


def test_a_service_scaled_to_zero_holds_the_first_request_until_a_replica_is_listed() -> None:
    async def scenario() -> None:
        gw = await gateway(route("cold", [], scale_to_zero=True, queue_limit=0), route("warm", []))
        assert (await gw.http.get("/warm/")).json()["code"] == "no_replica"  # none coming: 503 at once
        first = asyncio.create_task(gw.http.get("/cold/x"))
        await until(lambda: len(gw.table.routes["cold"].queue) == 1)
        second = await gw.http.get("/cold/x")  # queue_limit 0: one waits for the wake, no more
        assert second.status_code == 429
        report = observe.load_report(gw.table, 1.0)["replicas"]
        assert report == [{"service": "cold", "replica": "", "in_flight": 0, "queued": 1, "requests": 0, "errors": 0}]
        a = await Replica("a").start()
        gw.apply(route("cold", [a], scale_to_zero=True, queue_limit=0), route("warm", []))
        got = await first
        assert got.status_code == 200 and got.json()["target"] == "/x"
        await gw.close()

    run(scenario)

"""What the callback-driven path (no task per request) must still do: pipelined requests answered
in order, a client that leaves frees its replica's slot whether it waited in the queue or was at the
replica, a stream that falls silent is cut by the sweeper, and the one-pass and cached heads are
the same bytes as the long way builds."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from gpupool.gateway import headers as h
from gpupool.gateway.lasthead import RequestHeads, ResponseHeads
from tests.gateway.replicas import Call, Replica, gateway, route, run, until


def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    async def scenario() -> None:
        a = await Replica("a").start()
        gw = await gateway(route("svc", [a]))
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        get = "GET {} HTTP/1.1\r\nHost: x\r\n\r\n"
        writer.write("".join(get.format(p) for p in ("/svc/1", "/nope", "/svc/2", "/-/healthz", "/svc/3")).encode())
        got = b""
        while got.count(b"HTTP/1.1 ") < 5 or not got.endswith(b"}"):
            got += await reader.read(65536)
        order = [part.split(b"\r\n", 1)[0] for part in got.split(b"HTTP/1.1 ")[1:]]
        assert order == [b"200 X", b"404 Not Found", b"200 X", b"200 OK", b"200 X"]
        assert [s.target for s in a.seen] == ["/1", "/2", "/3"]
        writer.close()
        await gw.close()

    run(scenario)


def test_http10_keep_alive_is_kept_and_said() -> None:
    async def scenario() -> None:
        a = await Replica("a").start()
        gw = await gateway(route("svc", [a]))
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        for i in range(3):
            writer.write(f"GET /svc/{i} HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            assert b"Connection: keep-alive" in head
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        assert len(a.seen) == 3
        writer.close()
        await gw.close()

    run(scenario)


def test_a_client_that_leaves_frees_its_slot_at_the_replica_and_in_the_queue() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def hold(call: Call) -> None:
            await release.wait()
            call.respond(200, b"late")

        a = await Replica("a", hold).start()
        gw = await gateway(route("svc", [a], max_concurrency=1, queue_limit=4))
        state = gw.table.routes["svc"]
        port = int(gw.url.rsplit(":", 1)[1])
        first = await asyncio.open_connection("127.0.0.1", port)
        first[1].write(b"GET /svc/held HTTP/1.1\r\nHost: x\r\n\r\n")
        await until(lambda: a.in_flight == 1)
        second = await asyncio.open_connection("127.0.0.1", port)
        second[1].write(b"GET /svc/queued HTTP/1.1\r\nHost: x\r\n\r\n")
        await until(lambda: len(state.queue) == 1)
        second[1].close()  # leaves while queued
        await until(lambda: len(state.queue) == 0)
        first[1].close()  # leaves while the replica holds its request
        await until(lambda: state.replicas[0].in_flight == 0 and not state.replicas[0].idle)  # its connection closed
        release.set()
        assert (await gw.http.get("/svc/after")).text == "late"  # the slot is free again
        await gw.close()

    run(scenario)


def test_a_stream_that_falls_silent_is_cut_and_counted_as_a_timeout() -> None:
    async def scenario() -> None:
        forever = asyncio.Event()

        async def silent(call: Call) -> None:
            call.start_chunks()
            call.chunk(b"first")
            await call.writer.drain()
            await forever.wait()

        a = await Replica("a", silent).start()
        gw = await gateway(route("svc", [a], timeout_s=0.2))
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        writer.write(b"GET /svc/x HTTP/1.1\r\nHost: x\r\n\r\n")
        got = await reader.read()  # until the gateway closes: the answer cannot end properly
        assert got.startswith(b"HTTP/1.1 200") and b"first" in got and not got.endswith(b"0\r\n\r\n")
        replica = gw.table.routes["svc"].replicas[0]
        assert replica.stats.errors == {"timeout": 1} and replica.in_flight == 0
        writer.close()
        await gw.close()

    run(scenario)


_names = st.sampled_from(
    [b"Host", b"Connection", b"connection", b"Keep-Alive", b"X-Hop", b"Authorization", b"Content-Length",
     b"Transfer-Encoding", b"X-Forwarded-For", b"x-forwarded-host", b"Upgrade", b"Accept", b"TE", b"Date",
     b"X-Gpupool-User"]
)  # fmt: skip
_values = st.sampled_from(
    [b"keep-alive", b"Keep-Alive", b"close", b"x-hop", b"upgrade, X-Hop", b"2", b"abc", b"chunked"]
)
_headers = st.lists(st.tuples(_names, _values), max_size=8)


@given(_headers, st.booleans(), st.booleans())
def test_the_one_pass_request_head_is_the_long_ways(headers: list[tuple[bytes, bytes]], named: bool, up: bool) -> None:
    framing = h.request_framing(headers)
    caller = h.identity("max", "lab") if named else b""
    fields = dict(client="10.0.0.1", prefix=b"/svc", framing=framing, caller=caller, upgrade=up)
    long_way = h._upstream_fields_named(headers, "10.0.0.1", b"/svc", framing, caller, up)
    assert h.upstream_head(b"GET", b"/x", headers, **fields) == b"GET /x HTTP/1.1\r\n" + long_way  # type: ignore[arg-type]
    cache = RequestHeads()
    for target in (b"/a", b"/b"):  # the second from the cache
        assert cache.head(b"GET", target, headers, **fields) == h.upstream_head(b"GET", target, headers, **fields)  # type: ignore[arg-type]
    assert h.request_body(headers) == (framing, h.content_length(headers))
    said = [ln.split(b":")[0].lower() for ln in long_way.split(b"\r\n")]
    assert b"authorization" not in said and said.count(b"x-gpupool-user") == int(named)  # never the client's


@given(_headers, st.sampled_from([200, 204, 304, 404]), st.booleans(), st.booleans(), st.booleans())
def test_the_one_pass_response_head_is_the_long_ways(
    headers: list[tuple[bytes, bytes]], status: int, head_request: bool, http11: bool, keep: bool
) -> None:
    chunked = any(n.lower() == b"transfer-encoding" and b"chunked" in v.lower() for n, v in headers)
    framing = h.client_framing(h.response_framing(status, headers, head_request=head_request, chunked=chunked), http11)
    keep_alive = keep and framing is not h.Framing.CLOSE
    long_way = h.downstream_head(status, b"OK", headers, framing=framing, keep_alive=keep_alive, http11=http11)
    options = dict(head_request=head_request, http11=http11, keep_alive=keep)
    assert h.response_head(status, b"OK", headers, **options) == (long_way, framing)  # type: ignore[arg-type]
    cache = ResponseHeads()
    for _ in range(2):
        assert cache.head(status, b"OK", headers, **options) == (long_way, framing)  # type: ignore[arg-type]

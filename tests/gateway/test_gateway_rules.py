"""The gateway's pure parts: which replica, queue or refuse, retry or not, how long a replica
rests, the heads it writes, and the route table it accepts."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.gateway import headers as h
from gpupool.gateway.balance import Overflow, ejection_s, may_retry, overflow, pick_two, retry_after_s
from gpupool.gateway.routes import RouteTableError, parse_table, route_name


def _seq(*values: int):  # type: ignore[no-untyped-def]
    it = iter(values)
    return lambda n: next(it) % n


@pytest.mark.parametrize(
    ("loads", "cap", "draws", "chosen"),
    [
        ([3], 4, (), 0),
        ([4], 4, (), None),
        ([1, 5], 8, (0, 0), 0),  # first drawn 0, second 1: 1 < 5
        ([5, 1], 8, (0, 0), 1),
        ([2, 2], 8, (1, 0), 1),  # a tie keeps the first drawn
        ([8, 3, 8], 8, (0, 1, 0), 1),  # drawn 0 and 2, both full: the only free one
        ([8, 8], 8, (0, 0), None),
    ],
)
def test_pick_two(loads: list[int], cap: int, draws: tuple[int, ...], chosen: int | None) -> None:
    assert pick_two(loads, cap, _seq(*draws)) == chosen


@given(st.lists(st.integers(0, 10), min_size=1, max_size=12), st.integers(1, 10), st.integers(0, 2**32))
def test_pick_two_never_overfills_and_refuses_only_when_all_are_full(loads: list[int], cap: int, seed: int) -> None:
    chosen = pick_two(loads, cap, random.Random(seed).randrange)
    if chosen is None:
        assert all(load >= cap for load in loads)
    else:
        assert loads[chosen] < cap


def test_overflow_and_retry_after() -> None:
    assert overflow(0, 0, 10) is Overflow.UNAVAILABLE
    assert overflow(0, 0, 10, waking=True) is Overflow.QUEUE  # scaled to zero: wait for the first replica
    assert overflow(0, 0, 0, waking=True) is Overflow.QUEUE  # one waits even without a queue
    assert overflow(0, 1, 0, waking=True) is Overflow.REJECT
    assert overflow(0, 10, 10, waking=True) is Overflow.REJECT
    assert overflow(2, 9, 10) is Overflow.QUEUE
    assert overflow(2, 10, 10) is Overflow.REJECT
    assert overflow(2, 0, 0) is Overflow.REJECT
    assert retry_after_s(0, 2, 4, 30) == 1
    assert retry_after_s(80, 2, 4, 30) == 30  # the guess (10 x 3 s) capped by the timeout
    assert retry_after_s(16, 2, 4, 30) == 6


@pytest.mark.parametrize(
    ("method", "attempt", "sent", "answered", "replayable", "retry"),
    [
        ("POST", 0, False, False, False, True),  # refused connection: nothing was sent
        ("POST", 2, False, False, True, False),  # three tries at most
        ("GET", 0, True, False, True, True),
        ("PUT", 0, True, False, True, True),
        ("DELETE", 0, True, False, True, True),
        ("GET", 1, True, False, True, False),  # one retry only
        ("GET", 0, True, True, True, False),  # the client saw a byte
        ("POST", 0, True, False, True, False),
        ("PATCH", 0, True, False, True, False),
        ("PUT", 0, True, False, False, False),  # the body was too big to keep
    ],
)
def test_may_retry(method: str, attempt: int, sent: bool, answered: bool, replayable: bool, retry: bool) -> None:
    assert may_retry(method, attempt, sent=sent, answered=answered, body_replayable=replayable) is retry


def test_ejection_doubles_up_to_its_ceiling() -> None:
    assert [ejection_s(n, 1.0, 10.0) for n in (1, 2, 3, 4, 5, 100)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_the_request_head_a_replica_sees() -> None:
    sent = [
        (b"Host", b"gw:7071"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Authorization", b"Bearer gp_secret"),
        (b"Transfer-Encoding", b"chunked"),
        (b"X-Forwarded-For", b"10.1.1.1"),
        (b"Accept", b"*/*"),
        (b"X-Gpupool-User", b"admin"),  # a client's claim: never passed on
    ]
    caller = h.identity("max", "lab")
    head = h.upstream_head(
        b"POST", b"/v1?x=1", sent, client="127.0.0.1", prefix=b"/llm", framing=h.request_framing(sent), caller=caller
    )
    assert head == (
        b"POST /v1?x=1 HTTP/1.1\r\nHost: gw:7071\r\nAccept: */*\r\nX-Forwarded-For: 10.1.1.1, 127.0.0.1\r\n"
        b"X-Forwarded-Proto: http\r\nX-Forwarded-Prefix: /llm\r\nX-Forwarded-Host: gw:7071\r\n"
        b"X-Gpupool-User: max\r\nX-Gpupool-Project: lab\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    assert h.identity("max\r\nX-Evil: 1", "lab") == h.identity(None, "lab") == b""  # only names gpupool allows


@pytest.mark.parametrize(
    ("status", "headers", "head_request", "chunked", "http11", "framing"),
    [
        (200, [(b"Content-Length", b"2")], False, False, True, h.Framing.LENGTH),
        (200, [], False, True, True, h.Framing.CHUNKED),
        (200, [], False, True, False, h.Framing.CLOSE),  # an HTTP/1.0 client: the close ends it
        (200, [], False, False, True, h.Framing.CHUNKED),  # close-delimited upstream, chunked on
        (204, [], False, False, True, h.Framing.NONE),
        (200, [(b"Content-Length", b"9")], True, False, True, h.Framing.NONE),
    ],
)
def test_response_framing(
    status: int, headers: list[tuple[bytes, bytes]], head_request: bool, chunked: bool, http11: bool, framing: h.Framing
) -> None:
    upstream = h.response_framing(status, headers, head_request=head_request, chunked=chunked)
    assert h.client_framing(upstream, http11) is framing


def test_the_response_head_a_client_sees() -> None:
    got = [(b"Content-Type", b"text/event-stream"), (b"Transfer-Encoding", b"chunked"), (b"Keep-Alive", b"5")]
    head = h.downstream_head(200, b"OK", got, framing=h.Framing.CHUNKED, keep_alive=True)
    assert head == b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    old = h.downstream_head(
        200, b"OK", [(b"Content-Length", b"2")], framing=h.Framing.LENGTH, keep_alive=True, http11=False
    )
    assert old.endswith(b"Connection: keep-alive\r\n\r\n")
    assert h.bearer([(b"authorization", b"Bearer  tok ")]) == "tok"
    assert h.bearer([(b"Authorization", b"Basic abc")]) is None


def test_route_names_from_paths() -> None:
    assert [route_name(p) for p in ("/llm/v1", "/llm", "/jobs/12/lab", "/jobs", "/")] == [
        "llm",
        "llm",
        "jobs/12",
        "jobs",
        "",
    ]


GOOD = {
    "name": "llm",
    "kind": "service",
    "project": "lab",
    "public": False,
    "max_concurrency": 4,
    "queue_limit": 8,
    "timeout_s": 30,
    "endpoints": [{"replica": "llm-0", "host": "10.0.0.2", "port": 31000}],
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"kind": "batch"}, "kind must be one of"),
        ({"name": "a/b"}, "is not a service name"),
        ({"name": "metrics"}, "is not a service name"),
        ({"kind": "job", "name": "jobs/x"}, "jobs/<id>"),
        ({"max_concurrency": 0}, "max_concurrency must be a whole number >= 1"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"public": "yes"}, "public must be true or false"),
        ({"endpoints": [{"replica": "r", "host": "h", "port": 70000}]}, "port must be 1..65535"),
        ({"project": ""}, "project must be a non-empty string"),
    ],
)
def test_a_bad_route_table_is_refused_in_one_line(change: dict[str, object], says: str) -> None:
    with pytest.raises(RouteTableError) as e:
        parse_table({"routes": [{**GOOD, **change}]})
    assert says in str(e.value) and "\n" not in str(e.value) and "routes[0]" in str(e.value)


def test_a_good_route_table() -> None:
    table = parse_table({"routes": [GOOD, {**GOOD, "name": "jobs/7", "kind": "job"}]})
    assert table["llm"].endpoints[0].port == 31000 and table["llm"].prefix == "/llm"
    assert table["jobs/7"].job_id == 7 and table["llm"].job_id is None
    with pytest.raises(RouteTableError, match="appears twice"):
        parse_table({"routes": [GOOD, GOOD]})
    with pytest.raises(RouteTableError, match="expected an object"):
        parse_table([])

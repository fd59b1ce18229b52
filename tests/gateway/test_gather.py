"""Merging the load reports of several gateway processes into one (``gateway/gather.py``): gauges
summed from each process's latest report, counts each counted exactly once, kept over a failed
post, and a process that has not reported (or is gone) simply absent; and the pipes between them:
a full one or a gone reader loses no count, a report read in parts is read whole."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import Any

from gpupool.gateway import observe
from gpupool.gateway.gather import Counts, Gathered, merge, owe
from gpupool.gateway.pool import Table
from gpupool.gateway.routes import parse_table

BOUNDS = [0.01, 0.1]


def line(replica: str, in_flight: int = 0, queued: int = 0, requests: int = 0, latency: list[int] | None = None,
         service: str = "svc", took: float = 0.0) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {"service": service, "replica": replica, "in_flight": in_flight, "queued": queued}
    out.update(requests=requests, errors=0)
    if latency is not None:
        out.update(latency_counts=latency, latency_sum_s=took)
    return out


def report(*lines: dict[str, Any], window: float = 1.0) -> dict[str, Any]:
    return {"window_s": window, "latency_bounds": BOUNDS, "replicas": list(lines)}


def by_replica(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{r['service']}/{r['replica']}": r for r in body["replicas"]}


def test_gauges_and_counts_add_up_over_the_processes() -> None:
    own = report(line("a", 1, 2, 5, [4, 1, 0], took=0.02), line("b", 0, 1, 1, [1, 0, 0], took=0.001), window=1.2)
    child1 = report(line("a", 3, 0, 7, [6, 0, 1], took=0.5), line("b", 2, 1, 0, [0, 0, 0]))
    child2 = report(line("a", 0, 1, 2, [2, 0, 0], took=0.004))  # b not in its table yet
    owed: dict[tuple[str, str], Counts] = {}
    owe(owed, child1)
    owe(owed, child2)
    body = merge(own, [child1, child2], owed)
    assert body["window_s"] == 1.2 and body["latency_bounds"] == BOUNDS  # the first's
    got = by_replica(body)
    assert got["svc/a"] == line("a", 4, 3, 14, [12, 1, 1], took=0.524)
    assert got["svc/b"] == line("b", 2, 2, 1, [1, 0, 0], took=0.001)
    assert json.loads(json.dumps(body)) == body
    assert own["replicas"][0]["requests"] == 5  # the first's own report is not changed


def test_gauges_are_each_processs_latest_and_counts_are_counted_once() -> None:
    gathered = Gathered()
    gathered.take(7, report(line("a", 5, 0, 3)))
    gathered.take(7, report(line("a", 1, 0, 4)))  # two hand-overs between two posts
    body, _ = gathered.report(report(line("a", 0, 0, 0)))
    assert by_replica(body)["svc/a"] == line("a", 1, 0, 7)  # in flight now 1, not 6; requests 3 + 4
    body, _ = gathered.report(report(line("a", 0, 0, 0)))
    assert by_replica(body)["svc/a"] == line("a", 1, 0, 0)  # posted: not counted again; the gauge stays


def test_a_failed_post_keeps_the_counts_for_the_next() -> None:
    gathered = Gathered()
    gathered.take(7, report(line("a", 0, 0, 3, [3, 0, 0], took=0.003)))
    _, taken = gathered.report(report(line("a")))
    gathered.take(7, report(line("a", 0, 0, 2, [1, 1, 0], took=0.05)))  # arrives while the post is under way
    gathered.give_back(taken)  # the head did not take it
    body, _ = gathered.report(report(line("a", latency=[0, 0, 0])))
    assert by_replica(body)["svc/a"] == line("a", 0, 0, 5, [4, 1, 0], took=0.053)
    body, _ = gathered.report(report(line("a", latency=[0, 0, 0])))
    assert by_replica(body)["svc/a"]["requests"] == 0


def test_a_process_that_has_not_reported_or_is_gone_counts_nothing_now() -> None:
    gathered = Gathered()
    own = report(line("a", 2, 0, 1))
    assert gathered.report(own)[0] == own  # no other process has reported yet: the first's alone
    gathered.take(3, report(line("a", 4, 0, 6)))
    gathered.lost(3)  # it exited: what it ran is no longer in flight, what it answered is still owed
    assert by_replica(gathered.report(own)[0])["svc/a"] == line("a", 2, 0, 7)


def test_a_line_only_another_process_has_is_listed_and_one_no_process_lists_is_dropped() -> None:
    own = report(line("a", 1))
    waiting = report(line("", 0, 3, service="cold"), line("a"))  # a scaled-to-zero service's waiting requests
    owed: dict[tuple[str, str], Counts] = {}
    owe(owed, report(line("gone", 0, 0, 9)))
    body = merge(own, [waiting], owed)
    assert by_replica(body) == {"svc/a": line("a", 1), "cold/": line("", 0, 3, service="cold")}


def _table() -> Table:
    endpoint = {"replica": "r0", "host": "127.0.0.1", "port": 9}
    doc = {"name": "svc", "kind": "service", "project": "p", "public": True, "max_concurrency": 4}
    table = Table()
    table.apply(parse_table({"routes": [{**doc, "queue_limit": 1, "timeout_s": 5, "endpoints": [endpoint]}]}))
    return table


def _hand_over(fd: int, table: Table, intervals: int) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(observe.hand_over_loop(fd, table, 0.01))
        await asyncio.sleep(0.01 * intervals + 0.005)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def _drain(fd: int) -> bytes:
    out = b""
    with contextlib.suppress(BlockingIOError):
        while data := os.read(fd, 1 << 16):
            out += data
    return out


def test_a_forked_process_keeps_its_counts_while_its_pipe_is_full_or_the_first_is_gone() -> None:
    table = _table()
    stats = table.routes["svc"].replicas[0].stats
    for _ in range(3):
        stats.replied(200, 0.002)
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    filler = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            filler += os.write(write, b"x" * 4096)
    _hand_over(write, table, 3)  # full: nothing written, nothing lost
    assert len(_drain(read)) == filler and stats.reported == (0, 0)
    _hand_over(write, table, 3)
    lines = [json.loads(line) for line in _drain(read).splitlines()]
    assert [r["replicas"][0]["requests"] for r in lines if r["replicas"][0]["requests"]] == [3]  # once
    assert sum(sum(r["replicas"][0]["latency_counts"]) for r in lines) == 3
    stats.replied(200, 0.002)
    os.close(read)  # the first process is gone: its counts stay (it stops soon, as its parent changed)
    _hand_over(write, table, 2)
    assert stats.reported == (3, 0)
    os.close(write)


def test_the_first_reads_each_report_whole_and_forgets_a_process_at_its_pipes_end() -> None:
    read, write = os.pipe()
    os.set_blocking(read, False)
    gathered, fds = Gathered(), [read]
    one = json.dumps(report(line("a", 2, 0, 5))).encode() + b"\n"

    async def scenario() -> None:
        observe.read_reports(asyncio.get_running_loop(), fds, gathered)
        os.write(write, one[:10])  # a report may arrive in parts
        await asyncio.sleep(0.02)
        assert gathered.latest == {}
        os.write(write, one[10:] + b"not json\n" + one)
        await asyncio.sleep(0.02)
        assert gathered.latest == {read: report(line("a", 2, 0, 5))}
        assert gathered.owed[("svc", "a")].requests == 10  # two reports, bad line skipped
        os.close(write)
        await asyncio.sleep(0.02)

    asyncio.run(scenario())
    assert gathered.latest == {} and fds == []

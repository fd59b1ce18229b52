"""``python -m gpupool.gateway --processes 2 --head URL``: the head gets one load report per
interval with the whole gateway's load, as from one process. A fake head serves the route table
and records each ``POST /api/v1/gateway/stats``; requests go over fresh connections, which the
kernel spreads over both processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

INTERVAL_S = 0.2
HELD = 16


@dataclass
class _Head:
    """The fake head: its route table and the reports it took, each with when."""

    table: dict[str, Any] = field(default_factory=dict)
    reports: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def taken(self) -> list[tuple[float, dict[str, Any]]]:
        with self.lock:
            return list(self.reports)


class _Replica:
    """Answers at once, or (``/hold``) when released; counts what it answered and holds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answered = self.holding = 0
        self.release = threading.Event()


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


@pytest.fixture
def world() -> Iterator[tuple[_Head, _Replica, int, int]]:
    head, replica = _Head(), _Replica()

    class HeadHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(200, head.table)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/api/v1/gateway/stats":
                with head.lock:
                    head.reports.append((time.monotonic(), body))
            self._answer(200, {"kept": len(body["replicas"])})

        def _answer(self, code: int, doc: object) -> None:
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    class ReplicaHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path.endswith("/hold"):
                with replica.lock:
                    replica.holding += 1
                replica.release.wait(30)
                with replica.lock:
                    replica.holding -= 1
            with replica.lock:
                replica.answered += 1
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    head_server, head_port = _serve(HeadHandler)
    replica_server, replica_port = _serve(ReplicaHandler)
    try:
        yield head, replica, head_port, replica_port
    finally:
        replica.release.set()
        for server in (head_server, replica_server):
            server.shutdown()
            server.server_close()


def _until(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _get(url: str) -> int:
    with httpx.Client() as client:  # a connection each: the kernel spreads them over the processes
        return client.get(url, timeout=30).status_code


def _in_flight(report: dict[str, Any]) -> int:
    return sum(line["in_flight"] for line in report["replicas"])


@pytest.mark.parametrize("loop", ["auto", "asyncio"])  # uvloop where installed, and asyncio's own
def test_the_head_gets_one_report_per_interval_with_the_whole_gateways_load(
    world: tuple[_Head, _Replica, int, int], loop: str
) -> None:
    head, replica, head_port, replica_port = world
    endpoint = {"replica": "r0", "host": "127.0.0.1", "port": replica_port}
    doc = {"name": "svc", "kind": "service", "project": "p", "public": True, "max_concurrency": 2 * HELD}
    head.table = {"routes": [{**doc, "queue_limit": 100, "timeout_s": 30, "endpoints": [endpoint]}]}
    command = [sys.executable, "-m", "gpupool.gateway", "--head", f"http://127.0.0.1:{head_port}", "--port", "0"]
    command += ["--processes", "2", "--poll", "0.1s", "--report-every", f"{INTERVAL_S}s", "--loop", loop]
    env = {**os.environ, "GPUPOOL_GATEWAY_TOKEN": "gp_admin"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("gpupool gateway ready at http://127.0.0.1:"), (ready, proc.stderr)
        url = ready.split()[4]
        time.sleep(0.5)  # both processes have read the table (every 0.1 s)
        started = time.monotonic()
        with ThreadPoolExecutor(HELD) as pool:
            made = list(pool.map(lambda _: _get(f"{url}/svc/"), range(60)))
            assert made == [200] * 60
            held = [pool.submit(_get, f"{url}/svc/hold") for _ in range(HELD)]
            _until(lambda: replica.holding == HELD, 20, "the replica never held them all")
            # Held in both processes (16 connections all on one of two sockets: 1 in 32,768), and
            # one report says so: with one report per process, none would.
            _until(lambda: any(_in_flight(r) == HELD for _, r in head.taken()), 10, f"{head.taken()[-3:]}")
            replica.release.set()
            assert [f.result() for f in held] == [200] * HELD

        def counted() -> int:
            return sum(line["requests"] for _, r in head.taken() for line in r["replicas"])

        _until(lambda: counted() == 60 + HELD == replica.answered, 10, f"{counted()} of {replica.answered}")
        time.sleep(3 * INTERVAL_S)
        assert counted() == 60 + HELD  # each counted once
        after = [r for at, r in head.taken() if at >= started]
        assert _in_flight(after[-1]) == 0
        elapsed = time.monotonic() - started
        assert len(after) <= elapsed / INTERVAL_S * 1.3 + 2, (len(after), elapsed)  # one poster, not two
    finally:
        proc.terminate()
        proc.communicate(timeout=20)

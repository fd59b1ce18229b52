"""``python -m gpupool.gateway --processes N``: N processes on one port (SO_REUSEPORT), each with
its share of every replica's cap and route's queue, so that the caps hold across them; all stop
with the first, and the first with the head (``--parent``), whatever the signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gpupool.gateway.balance import share
from gpupool.gateway.pool import Part, RouteState
from gpupool.gateway.routes import parse_table


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 64])
def test_the_shares_add_up_to_the_cap_and_differ_by_one_at_most(count: int) -> None:
    for total in [0, 1, 2, 3, 5, 16, 63, 64, 65, 1000]:
        for key in ("r0@10.0.0.1:8000", "r1@10.0.0.2:8000", "chat"):
            parts = [share(total, key, i, count) for i in range(count)]
            assert sum(parts) == total, (total, key, parts)
            assert set(parts) <= {total // count, -(-total // count)}, (total, key, parts)


def test_the_processes_together_never_take_more_than_a_replicas_cap() -> None:
    endpoints = [{"replica": f"r{i}", "host": "127.0.0.1", "port": 9000 + i} for i in range(3)]
    doc = {"name": "svc", "kind": "service", "project": "p", "public": True, "max_concurrency": 5}
    table = parse_table({"routes": [{**doc, "queue_limit": 7, "timeout_s": 10, "endpoints": endpoints}]})
    for count in (1, 2, 4, 8):
        states = [RouteState(table["svc"], lambda n: 0, Part(i, count)) for i in range(count)]
        taken: dict[str, int] = {}
        for state in states:
            while (replica := state.try_acquire(time.monotonic())) is not None:
                taken[replica.endpoint.replica] = taken.get(replica.endpoint.replica, 0) + 1
        assert taken == {"r0": 5, "r1": 5, "r2": 5}, (count, taken)  # every slot, and no more
        assert sum(state.queue_limit for state in states) == 7


class _Slow(BaseHTTPRequestHandler):
    """A replica that holds each request 0.2 s and counts how many it holds at once."""

    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    now = peak = 0

    def do_GET(self) -> None:
        with _Slow.lock:
            _Slow.now += 1
            _Slow.peak = max(_Slow.peak, _Slow.now)
        time.sleep(0.2)
        with _Slow.lock:
            _Slow.now -= 1
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_replica() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Slow.now = _Slow.peak = 0
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _start(tmp_path: Path, replica_port: int, *args: str) -> tuple[subprocess.Popen[str], str, str]:
    endpoint = {"replica": "r0", "host": "127.0.0.1", "port": replica_port}
    doc = {"name": "svc", "kind": "service", "project": "p", "public": True, "max_concurrency": 4}
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps({"routes": [{**doc, "queue_limit": 100, "timeout_s": 30, "endpoints": [endpoint]}]}))
    command = [sys.executable, "-m", "gpupool.gateway", "--routes", str(routes), "--port", "0", *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith("gpupool gateway ready at http://127.0.0.1:"), (ready, proc.stderr)
    return proc, ready.split()[4], ready


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _gone(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_several_processes_serve_one_port_and_hold_the_cap_together(tmp_path: Path, slow_replica: int) -> None:
    proc, url, ready = _start(tmp_path, slow_replica, "--processes", "3")
    try:
        assert len(_children(proc.pid)) == 2
        assert ready.rstrip().endswith(", 3 processes)"), ready

        def call(_: int) -> int:
            with httpx.Client() as client:  # a connection each: the kernel spreads them over the processes
                return client.get(f"{url}/svc/", timeout=30).status_code

        with ThreadPoolExecutor(24) as pool:
            codes = list(pool.map(call, range(24)))
        assert codes == [200] * 24
        assert 3 <= _Slow.peak <= 4, _Slow.peak  # more than one process's share (2 at most): several served
        proc.send_signal(signal.SIGTERM)
        children = _children(proc.pid)
        assert proc.wait(20) == 0
        assert _gone(children, 10)
    finally:
        proc.kill()
        proc.communicate()


def test_the_forked_processes_stop_when_the_first_is_killed(tmp_path: Path, slow_replica: int) -> None:
    proc, _, _ = _start(tmp_path, slow_replica, "--processes", "2")
    try:
        children = _children(proc.pid)
        assert len(children) == 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert _gone(children, 10), "a gateway process outlived the first"
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("value", ["0", "65"])
def test_a_bad_process_count_is_one_line_and_exit_2(tmp_path: Path, value: str) -> None:
    command = [sys.executable, "-m", "gpupool.gateway", "--routes", str(tmp_path / "r.json"), "--processes", value]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == f"gateway: --processes {value}: must be 1..64"

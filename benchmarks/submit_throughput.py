"""Submission throughput: how many POST /api/v1/jobs the head accepts per second.

For each concurrency level C (default 1 and 8) a fresh head is started on a small fake cluster
(1 node, 1 GPU) and N jobs needing one GPU each are submitted by C threads, each with its own
keep-alive httpx client. The first job takes the GPU and the rest wait, so the head keeps a
growing queue of pending jobs, as it would under a burst of submissions.

Before the submissions, on the same head, it measures a baseline: sequential GET /healthz
requests per second over one keep-alive connection. The submission rate is also given as a
ratio to that baseline, which makes the figure comparable across machines.

    .venv/bin/python benchmarks/submit_throughput.py [--jobs 2000] [--concurrency 1 8] [--postgres] [--json]
        [--client httpx|raw]

``--client raw`` sends each submission as prepared bytes over a keep-alive socket instead of
through httpx: on a 2-core machine httpx's ~0.6 ms a request is a third of what 1,000 submissions
a second leave, taken from the head being measured. Each level also gives the head's own CPU
time per submission (all its threads, from /proc), steadier than the rate on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from _burst import burst, quarters
from _head import machine, machine_line, running_head, summary_ms

POSTGRES_SH = Path(__file__).resolve().parents[1] / "scripts" / "postgres.sh"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="submissions per concurrency level (default 2000)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 8], help="client threads, one run each (default 1 8)"
    )
    parser.add_argument("--healthz", type=int, default=300, help="sequential GET /healthz for the baseline (300)")
    parser.add_argument("--interval", type=float, default=0.5, help="controller interval of the head, s (default 0.5)")
    parser.add_argument(
        "--max-seconds", type=float, default=60.0, help="stop a level's submissions after this many s (default 60)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--postgres", action="store_true", help="the head on a throw-away PostgreSQL server (scripts/postgres.sh)"
    )
    parser.add_argument(
        "--client",
        choices=("httpx", "raw"),
        default="httpx",
        help="httpx: a keep-alive httpx client per thread (default); raw: a keep-alive socket per thread"
        " sending prepared bytes, which costs the machine's CPU ~10 times less a request",
    )
    return parser.parse_args(argv)


def healthz_baseline(url: str, count: int) -> dict[str, Any]:
    latencies: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as http:
        http.get("/healthz").raise_for_status()  # open the connection first
        t0 = time.perf_counter()
        for _ in range(count):
            t = time.perf_counter()
            http.get("/healthz").raise_for_status()
            latencies.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
    return {"requests": count, "per_s": round(count / wall, 1), "latency_ms": summary_ms(latencies)}


def cpu_s(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used, all its threads, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def submit_burst(
    url: str, token: str, jobs: int, threads: int, max_s: float, client: str = "httpx", head_pid: int | None = None
) -> dict[str, Any]:
    body = {"command": ["sleep", "3600"], "gpus": 1, "name": "burst"}
    headers = {"Authorization": f"Bearer {token}"}
    clients: list[Any] = []
    submitters: list[Any] = []
    for _ in range(threads):  # connect and authenticate before the clock starts
        if client == "raw":
            raw = RawClient(url, headers)
            clients.append(raw)
            raw.send(raw.prepare("GET", "/api/v1/whoami"))
            submitters.append(
                functools.partial(post_raw, raw, raw.prepare("POST", "/api/v1/jobs", json.dumps(body).encode()))
            )
        else:
            http = httpx.Client(base_url=url, headers=headers, timeout=60)
            clients.append(http)
            http.get("/api/v1/whoami").raise_for_status()
            submitters.append(functools.partial(post_job, http, body))
    head_cpu = cpu_s(head_pid) if head_pid is not None else 0.0
    try:
        result = burst(submitters, jobs, max_s)
    finally:
        for one in clients:
            one.close()
    head_cpu = cpu_s(head_pid) - head_cpu if head_pid is not None else float("nan")
    if result.errors:
        raise RuntimeError(f"{len(result.errors)} submissions failed, first: {result.errors[0]}")
    done = result.done
    return {
        "threads": threads,
        "submissions": len(done),
        "capped": len(done) < jobs,
        "wall_s": round(result.wall_s, 2),
        "per_s": round(result.per_s, 1),
        "latency_ms": summary_ms([lat for _, lat in done]),
        "per_s_by_quarter": quarters(done, result.t0),
        "head_cpu_ms_per_submission": round(1000 * head_cpu / max(len(done), 1), 3),
    }


class RawClient:
    """One keep-alive connection that sends a request prepared once, as bytes, and reads the answer
    by its Content-Length: ~10 times cheaper than an httpx request, so that on a small machine the
    benchmark's own clients take little of the CPU the head is measured on (``--client raw``)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        self.host = f"{parts.hostname}:{parts.port}"
        self.headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.sock = socket.create_connection((parts.hostname, parts.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def prepare(self, method: str, path: str, body: bytes | None = None) -> bytes:
        """The request's bytes, to send as often as wanted."""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.headers}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        return (head + "\r\n").encode() + (body or b"")

    def send(self, request: bytes) -> tuple[int, bytes]:
        """Send a prepared request; its status and body."""
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = next(
            (int(v) for k, _, v in (h.partition(b":") for h in lines[1:]) if k.lower() == b"content-length"), None
        )
        if length is None:
            raise RuntimeError(f"an answer without Content-Length: {head[:200]!r}")
        while len(rest) < length:
            self.buffer = rest
            self._more()
            rest = self.buffer
        self.buffer = rest[length:]
        return status, rest[:length]

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the head closed the connection")
        self.buffer += data

    def close(self) -> None:
        self.sock.close()


def post_raw(client: RawClient, request: bytes) -> str:
    """One prepared POST /api/v1/jobs over a raw connection; the new job's id."""
    status, body = client.send(request)
    if status != 201:
        raise RuntimeError(f"{status}: {body[:200]!r}")
    return str(json.loads(body)["id"])


def post_job(http: httpx.Client, body: dict[str, Any]) -> str:
    """One POST /api/v1/jobs; the new job's id, or an error carrying the answer."""
    response = http.post("/api/v1/jobs", json=body)
    if response.status_code != 201:
        raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
    return str(response.json()["id"])


def fresh_postgres_database(admin_url: str, name: str) -> str:
    """A new empty database on the throw-away server; its URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A throw-away PostgreSQL server (``scripts/postgres.sh``) for the run; its admin URL."""
    data = tempfile.mkdtemp(prefix="gpupool-bench-pg-")
    os.rmdir(data)  # the script makes it, owned by the postgres user
    started = subprocess.run([str(POSTGRES_SH), data, "55499"], capture_output=True, text=True)
    if started.returncode != 0:
        raise RuntimeError(f"scripts/postgres.sh failed: {started.stderr.strip()[-500:]}")
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(POSTGRES_SH), "stop", data], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(postgres_server()) if args.postgres else None
        return _run(args, admin)


def _run(args: argparse.Namespace, postgres: str | None) -> dict[str, Any]:
    levels = []
    for threads in args.concurrency:
        extra = ["--db", fresh_postgres_database(postgres, f"bench_{threads}")] if postgres else []
        with running_head(nodes=1, gpus=1, interval=args.interval, extra_args=extra) as head:
            baseline = healthz_baseline(head.url, args.healthz)
            burst = submit_burst(
                head.url, head.token, args.jobs, threads, args.max_seconds, args.client, head.process.pid
            )
            with httpx.Client(base_url=head.url, headers={"Authorization": f"Bearer {head.token}"}) as http:
                jobs = http.get("/api/v1/jobs", params={"all": "true"}, timeout=120).raise_for_status().json()
        states: dict[str, int] = {}
        for job in jobs:
            states[job["state"]] = states.get(job["state"], 0) + 1
        burst["listed_after"] = len(jobs)  # the API lists at most the newest 1000 jobs
        burst["states_after"] = states
        burst["healthz"] = baseline
        burst["ratio_to_healthz"] = round(burst["per_s"] / baseline["per_s"], 3)
        levels.append(burst)
    return {
        "benchmark": "submit_throughput",
        "machine": machine(),
        "params": {
            "jobs": args.jobs,
            "concurrency": args.concurrency,
            "cluster": "1 node x 1 fake GPU",
            "job": {"command": ["sleep", "3600"], "gpus": 1},
            "interval_s": args.interval,
            "max_seconds": args.max_seconds,
            "database": "PostgreSQL" if postgres else "SQLite",
            "client": args.client,
        },
        "levels": levels,
    }


def report(out: dict[str, Any]) -> str:
    p = out["params"]
    lines = [
        f"submission throughput: {p['jobs']} jobs of 1 GPU each per level, on a fresh head with {p['cluster']} "
        f"(one runs, the rest wait); controller interval {p['interval_s']:g} s; {p.get('database', 'SQLite')}; "
        f"{p.get('client', 'httpx')} clients",
        machine_line(out["machine"]),
    ]
    for lv in out["levels"]:
        h, lat = lv["healthz"], lv["latency_ms"]
        cap = f", stopped at the {p['max_seconds']:g} s cap" if lv["capped"] else ""
        lines += [
            f"  {lv['threads']} client thread(s): {lv['per_s']:.1f} submissions/s "
            f"({lv['submissions']} in {lv['wall_s']} s{cap})",
            f"    per request: p50 {lat['p50']:.1f} ms  p99 {lat['p99']:.1f} ms  max {lat['max']:.1f} ms",
            f"    the head's CPU (all its threads, /proc): {lv['head_cpu_ms_per_submission']:.3f} ms a submission",
            f"    by quarter of the run: {' / '.join(f'{r:.1f}' for r in lv['per_s_by_quarter'])} submissions/s",
            f"    baseline on the same head: {h['per_s']:.1f} GET /healthz/s sequential "
            f"(p50 {h['latency_ms']['p50']:.1f} ms); ratio submissions/healthz = {lv['ratio_to_healthz']:.3f}",
            f"    GET /api/v1/jobs?all=true afterwards listed {lv['listed_after']} jobs: "
            + ", ".join(f"{k} {v}" for k, v in sorted(lv["states_after"].items())),
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = run(args)
    print(json.dumps(out) if args.json else report(out))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The throughput/latency curve of a service (issue 17, "the knob, shown"): the example inference
server (examples/inference/server.py, a torch MLP on CPU) served with ``gpupool serve`` behind the
gateway, swept over ``--cpus`` and ``--replicas`` per deployment and ``--max-concurrency`` per point.

A throw-away head (one simulated node, so each replica's ``--cpus`` are distinct cores of this
machine) and a gateway (``python -m gpupool.gateway --head``) are started. For each deployment
(cpus x replicas that fit the machine's usable cores) the service is created through the CLI and
waited for; then for each concurrency K it is updated with ``--max-concurrency K`` (no replica
restarts: only the gateway's cap changes) and driven by ``ab -k`` (apache2-utils) with exactly
replicas x K clients for ``--seconds`` seconds (a closed loop: the gateway never queues, so a
point's latency is what K requests at once on C cores cost). Each point: requests a second, p50
and p99 latency, failures. The table goes to stdout (``--json`` for JSON) and the curve (latency
against throughput, one line per deployment, each point labelled with K) to ``--png``.

Figures are noisy on a shared machine: compare figures from one run.

    .venv/bin/python benchmarks/serve_curve.py [--cpus 1,2] [--replicas 1,2] [--concurrency 1,2,4,8]
        [--seconds 4] [--rows 256] [--png benchmarks/results/serve_curve.png] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from _head import RunningHead, free_port, gpupool_command, machine, machine_line, running_head

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "examples" / "inference" / "server.py"
NAME = "curve"
READY_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Point:
    cpus: int
    replicas: int
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    failed: int


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpus", default="1,2", help="cores per replica, a list")
    p.add_argument("--replicas", default="1,2", help="replica counts, a list")
    p.add_argument("--concurrency", default="1,2,4,8", help="--max-concurrency values, a list")
    p.add_argument("--seconds", type=float, default=4.0, help="load per point")
    p.add_argument("--rows", type=int, default=256, help="rows classified per request (the work of one)")
    p.add_argument("--png", type=Path, default=ROOT / "benchmarks" / "results" / "serve_curve.png")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="one deployment (1 cpu, 1 replica), K 1 and 2, 2 s each")
    a = p.parse_args(argv)
    try:
        cpus, replicas, concurrency = (_ints(v) for v in (a.cpus, a.replicas, a.concurrency))
    except ValueError as e:
        print(f"serve_curve: {e}", file=sys.stderr)
        return 2
    if a.quick:
        cpus, replicas, concurrency, a.seconds = [1], [1], [1, 2], 2.0
    if shutil.which("ab") is None:
        print("serve_curve: ab missing: apt-get install apache2-utils", file=sys.stderr)
        return 2
    cores = len(os.sched_getaffinity(0))
    deployments = [(c, r) for c in cpus for r in replicas if c * r <= cores]
    if not deployments:
        print(f"serve_curve: no deployment of --cpus x --replicas fits {cores} usable cores", file=sys.stderr)
        return 2
    points = run(deployments, concurrency, a.seconds, a.rows)
    info = machine()
    if a.json:
        print(json.dumps({"machine": info, "rows": a.rows, "points": [asdict(x) for x in points]}, indent=2))
    else:
        print(machine_line(info))
        print(table(points))
    if a.png:
        draw(points, a.png, machine_line(info), a.rows)
        print(f"curve: {a.png}", file=sys.stderr)
    return 0


def run(deployments: list[tuple[int, int]], concurrency: list[int], seconds: float, rows: int) -> list[Point]:
    points: list[Point] = []
    with running_head(nodes=1, gpus=1) as head, _gateway(head) as gateway:
        env = dict(os.environ, GPUPOOL_URL=head.url, GPUPOOL_TOKEN=head.token)
        target = f"{gateway}/{NAME}/predict?rows={rows}"
        for cpus, replicas in deployments:
            for k in concurrency:
                _serve(env, cpus, replicas, k)
                _wait_ready(head, gateway, cpus, replicas)
                time.sleep(1.5)  # the gateway reads the route table (its new cap) every 0.5 s
                _ab(target, head.token, replicas * k, 1.0)  # warm up connections and torch's pools
                point = _point(cpus, replicas, k, _ab(target, head.token, replicas * k, seconds))
                print(
                    f"  cpus {cpus} replicas {replicas} K {k}: {point.rps:.0f} req/s,"
                    f" p50 {point.p50_ms:.0f} ms, p99 {point.p99_ms:.0f} ms",
                    file=sys.stderr,
                )
                points.append(point)
            _cli(env, "service", "delete", NAME)
    return points


def _serve(env: dict[str, str], cpus: int, replicas: int, k: int) -> None:
    _cli(
        env,
        "serve",
        NAME,
        "--replicas",
        str(replicas),
        "--gpus",
        "0",
        "--cpus",
        str(cpus),
        "--max-concurrency",
        str(k),
        "--",
        sys.executable,
        str(SERVER),
    )


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([*gpupool_command(), *args], env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"serve_curve: gpupool {' '.join(args[:2])}: {done.stderr.strip()}")
    return done.stdout


def _wait_ready(head: RunningHead, gateway: str, cpus: int, replicas: int) -> None:
    """Until the service has ``replicas`` ready current replicas and none other, and the gateway
    sends requests to one that runs with ``cpus`` threads."""
    auth = {"Authorization": f"Bearer {head.token}"}
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(headers=auth, timeout=10) as c:
        while time.monotonic() < deadline:
            s = c.get(f"{head.url}/api/v1/services/{NAME}").json()
            live = [r for r in s.get("replica_list", []) if not r["stopping"]]
            if s.get("replicas", {}).get("ready") == replicas and len(live) == replicas:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    health = c.get(f"{gateway}/{NAME}/healthz").json()
                    if health.get("threads") == cpus:
                        return
            time.sleep(0.5)
    raise SystemExit(f"serve_curve: {replicas} replicas of {cpus} cpus not ready in {READY_TIMEOUT_S:.0f} s")


def _ab(url: str, token: str, clients: int, seconds: float) -> str:
    command = ["ab", "-k", "-q", "-c", str(clients), "-t", f"{seconds:g}", "-n", "1000000"]
    command += ["-H", f"Authorization: Bearer {token}", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise SystemExit(f"serve_curve: ab: {done.stderr.strip() or done.stdout[-400:]}")
    return done.stdout


def _point(cpus: int, replicas: int, k: int, ab_output: str) -> Point:
    f = parse_ab(ab_output)
    return Point(cpus, replicas, k, f["rps"], f["p50_ms"], f["p99_ms"], int(f["requests"]), int(f["failed"]))


def parse_ab(text: str) -> dict[str, float]:
    """Requests a second, p50 and p99 (ms), requests and failures (failed plus non-2xx) from ab's report."""

    def number(pattern: str, default: str | None = None) -> float:
        m = re.search(pattern, text, re.MULTILINE)
        if m is None:
            if default is None:
                raise ValueError(f"ab's report has no line matching {pattern!r}")
            return float(default)
        return float(m.group(1))

    return {
        "rps": number(r"^Requests per second:\s+([\d.]+)"),
        "p50_ms": number(r"^\s+50%\s+(\d+)"),
        "p99_ms": number(r"^\s+99%\s+(\d+)"),
        "requests": number(r"^Complete requests:\s+(\d+)"),
        "failed": number(r"^Failed requests:\s+(\d+)") + number(r"^Non-2xx responses:\s+(\d+)", "0"),
    }


def table(points: list[Point]) -> str:
    """A Markdown table, one row per point (what docs/guide/services.md shows)."""
    lines = [
        "| cpus/replica | replicas | max-concurrency | clients | req/s | p50 ms | p99 ms | failed |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for x in points:
        lines.append(
            f"| {x.cpus} | {x.replicas} | {x.concurrency} | {x.replicas * x.concurrency} | {x.rps:.0f}"
            f" | {x.p50_ms:.0f} | {x.p99_ms:.0f} | {x.failed} |"
        )
    return "\n".join(lines)


def draw(points: list[Point], path: Path, subtitle: str, rows: int) -> None:
    """Latency (p50 solid, p99 dashed) against throughput, a line per deployment, points labelled K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    groups: dict[tuple[int, int], list[Point]] = {}
    for x in points:
        groups.setdefault((x.cpus, x.replicas), []).append(x)
    for (cpus, replicas), mine in groups.items():
        line = ax.plot([x.rps for x in mine], [x.p50_ms for x in mine], marker="o", label=_label(cpus, replicas))
        colour = line[0].get_color()
        ax.plot([x.rps for x in mine], [x.p99_ms for x in mine], linestyle="--", color=colour, alpha=0.6)
        for x in mine:
            ax.annotate(f"K={x.concurrency}", (x.rps, x.p50_ms), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("throughput (requests/s through the gateway)")
    ax.set_ylabel("latency (ms): p50 solid, p99 dashed")
    ax.set_title(f"examples/inference/server.py, {rows} rows a request\n{subtitle}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(title="deployment")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _label(cpus: int, replicas: int) -> str:
    return f"{replicas} replica{'s' if replicas > 1 else ''} x {cpus} cpu{'s' if cpus > 1 else ''}"


@contextlib.contextmanager
def _gateway(head: RunningHead) -> Iterator[str]:
    """``python -m gpupool.gateway`` on a free port (as ``launch.start_gateway`` starts it), its log
    in the head's temporary directory rather than on this script's stderr."""
    port = free_port()
    command = [sys.executable, "-m", "gpupool.gateway", "--port", str(port), "--head", head.url]
    command += ["--token-file", str(head.data_dir / "admin-token")]
    with open(head.log_path.with_name("gateway.log"), "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "ready" not in line:
            raise SystemExit(f"serve_curve: the gateway did not start: {line.strip()!r}")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{text!r}: expected numbers separated by commas, e.g. 1,2,4") from None
    if not values or any(v < 1 or v > 64 for v in values):
        raise ValueError(f"{text!r}: expected numbers 1 to 64")
    return values


if __name__ == "__main__":
    sys.exit(main())

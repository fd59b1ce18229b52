"""Submit-to-running latency: how long a trivial job waits between its POST and running.

Starts a fresh head on a fake cluster big enough that no job waits for GPUs, then submits
trivial jobs one at a time. For each job it measures

* client: from just before the POST to the first poll (GET /api/v1/jobs/{id}, every --poll-ms)
  that sees the job running or any later state;
* server: started_at - submitted_at from the job's JSON (both stamped by the head's clock).

The client figure includes the POST itself and up to one poll interval (plus one GET) of
observation delay; the server figure includes neither.

    .venv/bin/python benchmarks/submit_latency.py [--jobs 200] [--interval 0.5] [--json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import datetime
from typing import Any

import httpx
from _head import machine, machine_line, running_head, summary_ms

NOT_YET = {"pending", "starting"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs measured (default 200)")
    parser.add_argument("--warmup", type=int, default=3, help="jobs run first and not counted (default 3)")
    parser.add_argument("--interval", type=float, default=0.5, help="controller interval of the head, s (default 0.5)")
    parser.add_argument("--nodes", type=int, default=4, help="fake nodes (default 4)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="fake GPUs per node (default 8)")
    parser.add_argument("--gpus", type=float, default=1.0, help="GPUs per job (default 1)")
    parser.add_argument("--command", default="true", help="job command (default 'true')")
    parser.add_argument("--poll-ms", type=float, default=5.0, help="pause between status polls, ms (default 5)")
    parser.add_argument("--timeout", type=float, default=30.0, help="give up on a job after this many s (default 30)")
    parser.add_argument(
        "--no-cgroups",
        action="store_true",
        help="start the head with --no-cgroups: the cost of the walls by difference",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser.parse_args(argv)


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def measure_one(http: httpx.Client, body: dict[str, Any], poll_s: float, timeout_s: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    response = http.post("/api/v1/jobs", json=body)
    t_posted = time.perf_counter()
    response.raise_for_status()
    job_id = response.json()["id"]
    polls = 0
    while True:
        job = http.get(f"/api/v1/jobs/{job_id}").raise_for_status().json()
        polls += 1
        now = time.perf_counter()
        if job["state"] not in NOT_YET:
            break
        if now - t0 > timeout_s:
            raise RuntimeError(f"job {job_id} still {job['state']} after {timeout_s:g} s: {job.get('reason')}")
        time.sleep(poll_s)
    server = None
    if job.get("started_at") and job.get("submitted_at"):
        server = (_ts(job["started_at"]) - _ts(job["submitted_at"])).total_seconds()
    return {
        "id": job_id,
        "client_s": now - t0,
        "post_s": t_posted - t0,
        "server_s": server,
        "state": job["state"],
        "polls": polls,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    body = {"command": shlex.split(args.command), "gpus": args.gpus, "name": "latency"}
    results: list[dict[str, Any]] = []
    wall0 = time.perf_counter()
    with (
        running_head(
            nodes=args.nodes,
            gpus=args.gpus_per_node,
            interval=args.interval,
            extra_args=["--no-cgroups"] if args.no_cgroups else [],
        ) as head,
        httpx.Client(base_url=head.url, headers={"Authorization": f"Bearer {head.token}"}, timeout=30) as http,
    ):
        for _ in range(args.warmup):
            measure_one(http, body, args.poll_ms / 1000, args.timeout)
        for _ in range(args.jobs):
            results.append(measure_one(http, body, args.poll_ms / 1000, args.timeout))
        stray = [r for r in results if r["state"] not in ("running", "succeeded")]
    wall = time.perf_counter() - wall0
    server = [r["server_s"] for r in results if r["server_s"] is not None]
    return {
        "benchmark": "submit_latency",
        "machine": machine(),
        "params": {
            "jobs": args.jobs,
            "warmup": args.warmup,
            "interval_s": args.interval,
            "cluster": f"{args.nodes} nodes x {args.gpus_per_node} fake GPUs",
            "job": {"command": body["command"], "gpus": args.gpus},
            "poll_ms": args.poll_ms,
            "cgroups": not args.no_cgroups,
        },
        "client_submit_to_running_ms": summary_ms([r["client_s"] for r in results]),
        "server_started_minus_submitted_ms": summary_ms(server) if server else None,
        "post_ms": summary_ms([r["post_s"] for r in results]),
        "polls_per_job_mean": round(sum(r["polls"] for r in results) / len(results), 2),
        "observed_states": sorted({r["state"] for r in results}),
        "jobs_not_running_or_succeeded": len(stray),
        "wall_s": round(wall, 2),
    }


def _row(label: str, s: dict[str, float] | None) -> str:
    if s is None:
        return f"  {label:<38} (none)"
    return (
        f"  {label:<38} p50 {s['p50']:8.1f}  p90 {s['p90']:8.1f}  p99 {s['p99']:8.1f}  "
        f"max {s['max']:8.1f}  mean {s['mean']:8.1f}"
    )


def report(out: dict[str, Any]) -> str:
    p = out["params"]
    lines = [
        f"submit-to-running latency, {p['jobs']} jobs one at a time (+{p['warmup']} warm-up, not counted)",
        f"  head: {p['cluster']}, controller interval {p['interval_s']:g} s; "
        f"job {shlex.join(p['job']['command'])!r} on {p['job']['gpus']:g} GPU; poll every {p['poll_ms']:g} ms",
        machine_line(out["machine"]),
        "figures in ms:",
        _row("client: before POST -> seen running", out["client_submit_to_running_ms"]),
        _row("server: started_at - submitted_at", out["server_started_minus_submitted_ms"]),
        _row("client: POST round trip", out["post_ms"]),
        f"  polls per job (mean): {out['polls_per_job_mean']}; states seen: {', '.join(out['observed_states'])}; "
        f"failed/other: {out['jobs_not_running_or_succeeded']}; wall {out['wall_s']} s",
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

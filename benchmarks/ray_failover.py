"""The Ray backend's two figures: how fast a dead node's gang is requeued, and what Ray costs
on the way from submit to running, next to the local backend.

Starts a head with ``--backend ray`` (which starts a Ray head with no GPUs of its own) and two
``gpupool join`` nodes of 2 simulated GPUs each, all on this machine, then

* submit-to-running: trivial 1-GPU jobs one at a time; server figure started_at - submitted_at,
  the same jobs on a local-backend head of the same shape for comparison;
* failover, --rounds times: a 2-worker gang (one worker per node) runs, the node of worker 1 is
  killed with SIGKILL of its process group (join, raylet, actor), and the figures are the times
  from the kill to the node shown ``down`` and to the job's ``requeued`` event (the head waits for
  the dead node's workers to fence themselves before it requeues). The node then rejoins.

    .venv/bin/python benchmarks/ray_failover.py [--rounds 3] [--jobs 30] [--node-timeout 10s] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from _head import gpupool_command, machine, machine_line, running_head, summary_ms


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="node kills measured (default 3)")
    parser.add_argument("--jobs", type=int, default=30, help="jobs for submit-to-running, per backend (default 30)")
    parser.add_argument("--node-timeout", default="10s", help="the head's --node-timeout (default 10s)")
    parser.add_argument("--interval", type=float, default=0.5, help="controller interval, s (default 0.5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser.parse_args(argv)


class Node:
    def __init__(self, url: str, data_dir: Path, name: str) -> None:
        self.url, self.name = url, name
        self.dir = data_dir.parent / name
        self.token_file = data_dir / "join-token"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, http: httpx.Client) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        cmd = [*gpupool_command(), "join", self.url, "--token-file", str(self.token_file), "--name", self.name]
        cmd += ["--num-gpus", "2", "--num-cpus", "1", "--data-dir", str(self.dir)]
        with open(self.dir / "join.out", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait(lambda: node_state(http, self.name) == "up", 120, f"node {self.name} up")

    def crash(self) -> float:
        assert self.proc is not None
        at = time.time()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        return at

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
            self.proc = None


def wait(predicate: Any, timeout: float, what: str, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out waiting for {what}")


def node_state(http: httpx.Client, name: str) -> str | None:
    nodes = http.get("/api/v1/nodes").raise_for_status().json()
    return next((n["state"] for n in nodes if n["name"] == name), None)


def job(http: httpx.Client, job_id: int) -> dict[str, Any]:
    return dict(http.get(f"/api/v1/jobs/{job_id}").raise_for_status().json())


def submit(http: httpx.Client, body: dict[str, Any]) -> int:
    return int(http.post("/api/v1/jobs", json=body).raise_for_status().json()["id"])


def latencies(http: httpx.Client, jobs: int) -> list[float]:
    out = []
    for i in range(jobs + 2):  # two warm-up jobs
        job_id = submit(http, {"command": ["true"], "gpus": 1})
        done = wait(lambda j=job_id: (d := job(http, j))["state"] not in ("pending", "starting") and d, 30, "start")
        if i >= 2:
            out.append((_ts(done["started_at"]) - _ts(done["submitted_at"])).total_seconds())
    return out


def failover_round(http: httpx.Client, nodes: dict[str, Node]) -> dict[str, float]:
    job_id = submit(http, {"command": ["sleep", "600"], "gpus": 2, "workers": 2, "max_restarts": 5})
    running = wait(lambda: (d := job(http, job_id))["state"] == "running" and d, 60, "the gang running")
    victim = next(p["node"] for p in running["placements"] if p["worker"] == 1)
    crashed = nodes[victim].crash()
    wait(lambda: node_state(http, victim) == "down", 120, "the node down", every=0.02)
    down_s = time.time() - crashed
    requeued = wait(
        lambda: next((e for e in job(http, job_id)["events"] if e["kind"] == "requeued"), None), 120, "the requeue"
    )
    requeued_s = _ts(requeued["time"]).timestamp() - crashed
    http.post(f"/api/v1/jobs/{job_id}/cancel").raise_for_status()
    nodes[victim].start(http)
    return {"down_s": down_s, "requeued_s": requeued_s}


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        running_head(nodes=2, gpus=2, interval=args.interval) as head,
        httpx.Client(base_url=head.url, headers={"Authorization": f"Bearer {head.token}"}, timeout=60) as http,
    ):
        local = latencies(http, args.jobs)
    ray_args = ["--backend", "ray", "--node-name", "head", "--fake-gpus", "0", "--placement", "spread"]
    ray_args += ["--node-timeout", args.node_timeout]
    with (
        running_head(nodes=None, gpus=0, interval=args.interval, extra_args=ray_args, ready_timeout=180) as head,
        httpx.Client(base_url=head.url, headers={"Authorization": f"Bearer {head.token}"}, timeout=60) as http,
    ):
        nodes = {name: Node(head.url, head.data_dir, name) for name in ("w1", "w2")}
        try:
            for node in nodes.values():
                node.start(http)
            ray = latencies(http, args.jobs)
            rounds = [failover_round(http, nodes) for _ in range(args.rounds)]
        finally:
            for node in nodes.values():
                node.stop()
            subprocess.run(
                [str(Path(sys.executable).with_name("ray")), "stop", "--force"], capture_output=True, check=False
            )
    return {
        "benchmark": "ray_failover",
        "machine": machine(),
        "params": {"rounds": args.rounds, "jobs": args.jobs, "node_timeout": args.node_timeout},
        "submit_to_running_ms": {"local": summary_ms(local), "ray": summary_ms(ray)},
        "node_down_ms": summary_ms([r["down_s"] for r in rounds]),
        "requeued_ms": summary_ms([r["requeued_s"] for r in rounds]),
        "rounds": rounds,
    }


def report(out: dict[str, Any]) -> str:
    def row(label: str, s: dict[str, float]) -> str:
        return f"  {label:<44} p50 {s['p50']:8.0f}  max {s['max']:8.0f}  mean {s['mean']:8.0f}"

    p = out["params"]
    return "\n".join(
        [
            f"Ray backend: 3 Ray nodes on one machine (head + 2 joined, 2 simulated GPUs each), "
            f"--node-timeout {p['node_timeout']}",
            machine_line(out["machine"]),
            "figures in ms:",
            row(f"submit -> running, local backend ({p['jobs']} jobs)", out["submit_to_running_ms"]["local"]),
            row(f"submit -> running, Ray backend ({p['jobs']} jobs)", out["submit_to_running_ms"]["ray"]),
            row(f"node SIGKILLed -> shown down ({p['rounds']} rounds)", out["node_down_ms"]),
            row("node SIGKILLed -> gang requeued", out["requeued_ms"]),
        ]
    )


def main() -> None:
    args = parse_args()
    out = run(args)
    print(json.dumps(out, indent=2) if args.json else report(out))


if __name__ == "__main__":
    main()

"""Job arrays and batches: how long one request takes to make 1,000 jobs, and what they cost a cycle.

On a fresh head (1 node x 1 fake GPU, so nearly every task waits) it times, each --repeat times:

* ``POST /api/v1/arrays`` with ``--tasks`` tasks (``gpupool submit --array 0-999``), until the
  answer (the array committed as one record; the controller writes its tasks just after);
* ``POST /api/v1/jobs:batch`` with ``--tasks`` jobs, likewise;

then reads the head's scheduler-cycle histogram (``/metrics``) to say how long cycles took with
thousands of array tasks pending, against cycles on an empty queue measured first.

    .venv/bin/python benchmarks/array_submit.py [--tasks 1000] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from typing import Any

import httpx
from _head import machine, machine_line, running_head

BODY = {"command": ["sleep", "3600"], "gpus": 1, "name": "sweep"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000, help="tasks per array and jobs per batch (1000)")
    parser.add_argument("--repeat", type=int, default=5, help="arrays and batches made, each timed (5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser.parse_args()


def cycles(http: httpx.Client) -> tuple[float, int]:
    """(sum of seconds, count) of the head's scheduler cycles so far."""
    text = http.get("/metrics").text
    total = re.search(r"^gpupool_scheduler_cycle_seconds_sum (\S+)$", text, re.M)
    count = re.search(r"^gpupool_scheduler_cycle_seconds_count (\S+)$", text, re.M)
    return (float(total[1]) if total else 0.0, int(float(count[1])) if count else 0)


def mean_cycle_ms(http: httpx.Client, before: tuple[float, int], wait_s: float) -> float:
    time.sleep(wait_s)
    after = cycles(http)
    n = after[1] - before[1]
    return round((after[0] - before[0]) / n * 1000, 2) if n else float("nan")


def main() -> None:
    args = parse_args()
    out: dict[str, Any] = {"machine": machine(), "tasks": args.tasks}
    with running_head(nodes=1, gpus=1) as head:
        headers = {"Authorization": f"Bearer {head.token}"}
        with httpx.Client(base_url=head.url, headers=headers, timeout=120) as http:
            out["cycle_ms_empty_queue"] = mean_cycle_ms(http, cycles(http), 6.0)  # a full cycle every 5 s
            array_s, batch_s = [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                made = http.post("/api/v1/arrays", json={**BODY, "array": f"0-{args.tasks - 1}"})
                array_s.append(time.perf_counter() - t)
                assert made.status_code == 201 and made.json()["tasks"] == args.tasks, made.text[:300]
                t = time.perf_counter()
                made = http.post("/api/v1/jobs:batch", json={"jobs": [BODY] * args.tasks})
                batch_s.append(time.perf_counter() - t)
                assert made.status_code == 201 and len(made.json()) == args.tasks, made.text[:300]
            pending = 2 * args.repeat * args.tasks
            out["array_ms"] = {
                "median": round(statistics.median(array_s) * 1000, 1),
                "max": round(max(array_s) * 1000, 1),
            }
            out["batch_ms"] = {
                "median": round(statistics.median(batch_s) * 1000, 1),
                "max": round(max(batch_s) * 1000, 1),
            }
            out["jobs_per_s_array"] = round(args.tasks / statistics.median(array_s))
            out["jobs_per_s_batch"] = round(args.tasks / statistics.median(batch_s))
            out["pending"] = pending
            out["cycle_ms_with_pending"] = mean_cycle_ms(http, cycles(http), 6.0)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"job arrays and batches of {args.tasks}, {args.repeat} of each, on a fresh head (1 node x 1 fake GPU)")
    print(machine_line(out["machine"]))
    print(
        f"  POST /arrays ({args.tasks} tasks): median {out['array_ms']['median']} ms, max {out['array_ms']['max']} ms"
        f" = {out['jobs_per_s_array']} tasks accepted a second"
    )
    print(
        f"  POST /jobs:batch ({args.tasks} jobs): median {out['batch_ms']['median']} ms,"
        f" max {out['batch_ms']['max']} ms = {out['jobs_per_s_batch']} jobs/s"
    )
    print(
        f"  mean scheduler cycle: {out['cycle_ms_empty_queue']} ms on an empty queue,"
        f" {out['cycle_ms_with_pending']} ms with {pending} pending (half of them array tasks)"
    )


if __name__ == "__main__":
    main()

"""Simulator speed and the Philly figures for docs/performance/log.md: replay the whole Philly job table
(82k jobs, or a window of it) on 352 nodes x 8 GPUs under each policy and print the summary
figures with the wall time of each replay.

    python benchmarks/simulate_philly.py [--policies fifo,fifo-isolated,default] [--window 2017-10-01,2017-12-01]

The contended case of issue 16 (thousands of jobs waiting): Helios' window, durations times
2.573 (Helios' mean duration, 29,541 s, over this table's 11,481 s in that window) and arrivals
2.5 times as frequent:

    python benchmarks/simulate_philly.py --policies fifo-isolated,default --window 2017-10-01,2017-12-01 \
        --duration-scale 2.573 --scale-load 2.5
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from gpupool.cli.simulate import Study
from gpupool.scheduler.config import SchedulerConfig
from gpupool.sim.cluster import uniform

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACES / "philly_pollux_jobs.csv")
    parser.add_argument("--vcs", type=Path, default=TRACES / "philly_vc_nodes_helios_qssf.csv", help="VC sizes")
    parser.add_argument("--nodes", type=int, default=352)
    parser.add_argument("--policies", default="fifo,fifo-isolated,default")
    parser.add_argument("--window", default=None, help="e.g. 2017-10-01,2017-12-01 (Helios' Philly setup)")
    parser.add_argument("--scale-load", type=float, default=1.0, help="arrivals this many times as frequent")
    parser.add_argument("--duration-scale", type=float, default=1.0, help="run times multiplied by this")
    parser.add_argument("--partition", default=None, help="fifo-isolated's partition: nodes (its default) or gpus")
    parser.add_argument(
        "--checkpointed",
        action="store_true",
        help="every job checkpoints: a preempted job resumes, less a minute (Tiresias' assumption)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per policy instead of a table")
    parser.add_argument("--placement", default=SchedulerConfig().placement, help="placement (default: the head's)")
    parser.add_argument(
        "--reclaim-min-run", default="0s", help="a borrower's job runs this long before reclaim stops it (e.g. 30m)"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    study = Study.prepare(
        args.trace,
        "philly",
        args.policies,
        args.placement,
        args.vcs,
        args.window,
        args.scale_load,
        None,
        8,
        args.partition,
        args.reclaim_min_run,
    )
    if args.duration_scale != 1.0:
        longer = [
            replace(j, duration=None if j.duration is None else j.duration * args.duration_scale) for j in study.jobs
        ]
        study = replace(study, jobs=longer)
    if args.checkpointed:
        saved = [replace(j, spec=replace(j.spec, checkpoint_dir="/checkpoints")) for j in study.jobs]
        study = replace(study, jobs=saved)
    load_s = time.perf_counter() - started
    print(
        f"loaded {len(study.jobs):,} jobs in {load_s:.1f} s; {args.nodes} nodes x 8 GPUs; "
        f"arrivals x{args.scale_load:g}, durations x{args.duration_scale:g}"
        + (", every job checkpoints" if args.checkpointed else "")
        + (f", reclaim after {args.reclaim_min_run} of a run" if args.reclaim_min_run != "0s" else "")
    )
    keys = (
        "completed",
        "avg_jct_s",
        "p95_jct_s",
        "avg_queue_s",
        "p95_queue_s",
        "gpu_utilization",
        "fairness",
        "preemptions",
    )
    if not args.json:
        print(f"{'policy':<14}" + "".join(f"{k:>16}" for k in keys) + f"{'wall_s':>10}")
    for name in study.policies:
        _, figures = study.run(uniform(args.nodes, 8), name)
        figures.pop("placed")
        if args.json:
            print(json.dumps({"policy": name, **figures}))
            continue
        cells = "".join(
            f"{figures[k]:>16,.3f}" if isinstance(figures[k], float) else f"{figures[k]:>16,}" for k in keys
        )
        print(f"{name:<14}{cells}{figures['wall_s']:>10.1f}")
        print(f"  preempted jobs {figures['preempted_jobs']:,}, the most of one job {figures['most_preemptions']:,}")
        fair = ("slowdown_fairness", "queue_fairness", "max_min_slowdown", "max_min_queue", "entitled_fairness")
        print("  " + ", ".join(f"{k} {_figure(figures[k])}" for k in fair))
        heads = ("jobs", "completed", "avg_queue_s", "p95_queue_s", "avg_slowdown", "entitled")
        print(f"  {'project':<12}" + "".join(f"{h:>14}" for h in heads))
        for project, row in figures["per_project"].items():
            cells = (
                f"{row['jobs']:>14,}{row['completed']:>14,}{_figure(row['avg_queue_s'], 0):>14}"
                f"{_figure(row['p95_queue_s'], 0):>14}{_figure(row['avg_slowdown'], 2):>14}"
                f"{_figure(row['entitled']):>14}"
            )
            print(f"  {project:<12}{cells}")


def _figure(value: float | None, digits: int = 3) -> str:
    """A figure that may be missing (a project whose jobs never started has no wait)."""
    return "—" if value is None else f"{value:,.{digits}f}"


if __name__ == "__main__":
    main()

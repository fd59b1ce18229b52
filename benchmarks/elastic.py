"""What elastic gangs buy (issue 35): the contended Philly replay with rigid gangs, and again with
every multi-worker job elastic from half its width (at least 1) up to its width, side by side:
mean and p95 JCT, mean and p95 queueing, GPU utilisation.

The trace, cluster and projects are ``org_tree.py``'s: two weeks of Helios' window (2017-10-01 to
10-15) on 352 nodes x 8 GPUs, the 11 virtual clusters with their Helios quotas, durations x 2.573
and arrivals x 2.5 (the contended case). A trace job's duration is at its full width; an elastic
job on w of its W workers runs at (w/W)^alpha of that speed (``--alpha``, 0.8 by default:
``sim/elastic.py``), so it finishes later at its minimum and sooner once grown.

What the elastic column shows depends on the scheduler: one that never grows a job starts each
elastic job at its minimum and leaves it there (it starts sooner but runs slower); the grow and
shrink actions are what let it widen into idle GPUs and give back only its extra workers.

    .venv/bin/python benchmarks/elastic.py [--window 2017-10-01,2017-10-15] [--minimum 0.5] [--alpha 0.8] [--json]
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import _philly

from gpupool.sim import elastic
from gpupool.sim.cluster import uniform
from gpupool.sim.trace_job import TraceJob

FIGURES = (
    ("avg_jct_s", "mean JCT"),
    ("p95_jct_s", "p95 JCT"),
    ("avg_queue_s", "mean queue"),
    ("p95_queue_s", "p95 queue"),
    ("gpu_utilization", "GPU utilisation"),
    ("completed", "completed"),
    ("preemptions", "preemptions"),
    ("wall_s", "replay wall (s)"),
)


def main() -> None:
    parser = _philly.parser(__doc__.splitlines()[0])
    parser.add_argument("--minimum", default="half", help="an elastic job's minimum: half, or a part of its width")
    parser.add_argument("--alpha", type=float, default=elastic.DEFAULT_ALPHA, help="the speed model's exponent")
    parser.add_argument(
        "--split-gpus",
        type=int,
        default=0,
        help="make each job of more GPUs a gang of workers of this many GPUs each, in both runs (a DDP job's"
        " ranks; Philly's loader makes a job of up to 8 GPUs one worker, so only its 35 wider ones are gangs);"
        " 0: as the trace has them",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = parser.parse_args()
    fraction = elastic.parse_fraction(args.minimum)
    elastic.check_alpha(args.alpha)
    study, longer = _philly.load(args)
    if args.split_gpus:
        longer = [_split(j, args.split_gpus) for j in longer]
    variants = {
        "rigid": longer,
        f"elastic ({args.minimum})": elastic.make_elastic(longer, fraction),
    }
    gangs = sum(1 for j in longer if j.spec.workers > 1)
    runs: dict[str, dict[str, Any]] = {}
    for label, jobs in variants.items():
        started = time.perf_counter()
        _, figures = replace(study, jobs=jobs, elastic_alpha=args.alpha).run(uniform(args.nodes, 8), args.policy)
        figures = {key: figures[key] for key, _ in FIGURES}
        figures["wall_s"] = time.perf_counter() - started
        runs[label] = figures
    if args.json:
        setup = {"window": args.window, "policy": args.policy, "alpha": args.alpha, "multi_worker_jobs": gangs}
        print(json.dumps({**setup, **runs}, indent=2))
        return
    print(
        f"Philly {args.window}, {len(longer):,} jobs ({gangs:,} multi-worker) on {args.nodes} nodes x 8 GPUs, "
        f"arrivals x{args.scale_load:g}, durations x{args.duration_scale:g}, policy {args.policy}, "
        f"elastic minimum {args.minimum}, alpha {args.alpha:g}"
        + (f", jobs split into {args.split_gpus}-GPU workers" if args.split_gpus else "")
    )
    print(f"{'':<18}" + "".join(f"{label:>22}" for label in runs))
    for key, name in FIGURES:
        print(f"{name:<18}" + "".join(f"{_cell(key, figures[key]):>22}" for figures in runs.values()))


def _split(job: TraceJob, gpus: int) -> TraceJob:
    """A job of whole GPUs per worker beyond ``gpus`` as a gang of ``gpus``-GPU workers (its GPUs in all kept)."""
    spec = job.spec
    if spec.gpus <= gpus or spec.gpus % gpus:
        return job
    return replace(job, spec=replace(spec, gpus=float(gpus), workers=spec.workers * int(spec.gpus // gpus)))


def _cell(key: str, value: Any) -> str:
    if key == "gpu_utilization":
        return f"{value:.3f}"
    if key.endswith("_s") and key != "wall_s":
        return f"{value:,.0f} s ({value / 3600:.2f} h)"
    return f"{value:,.0f}" if isinstance(value, float) else f"{value:,}"


if __name__ == "__main__":
    main()

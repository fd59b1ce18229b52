"""What a power budget costs, on simulated GPUs (issue 33): a slice of the Philly job table on
uniform H100 nodes (70 W idle, 700 W default limit) at budgets of 100 %, 80 % and 60 % of the
cluster's peak (every GPU at its default limit), every job at ``max`` and with half the jobs at
``efficient``: energy, peak power, and the mean JCT and queueing. Then what deferring buys: a
share of the jobs may wait up to 12 h for cleaner hours on a day-shaped carbon curve.

    python benchmarks/power.py [--window 2017-10-01,2017-10-04] [--nodes 40] [--budgets 100,80,60]

The default (three days, 40 nodes x 8 GPUs, 1,963 jobs) runs in about a minute on the 2-core VM.
The carbon curve is synthetic, shaped like a grid with midday solar (``CARBON_BY_HOUR``, gCO2/kWh,
UTC hours): it shows the mechanism, not a real grid's figures.

The real-GPU half of the benchmark (calibration and a training example's energy per step) needs a
GPU and lives with the GPU suite.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpupool.cli.simulate import Study
from gpupool.cli.simulate_power import compare
from gpupool.scheduler.config import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.sim.power import PowerConfig, assign_modes, parse_budget, pick_deferrable
from gpupool.sim.signals import Signal

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly"
# A day of a grid with solar at midday, gCO2/kWh by UTC hour (synthetic; see the module).
CARBON_BY_HOUR = (450, 460, 470, 470, 460, 440, 400, 340, 280, 220, 180, 160, 150, 150, 160, 190, 250, 330,
                  400, 440, 460, 460, 455, 450)  # fmt: skip
# (figure, heading): the pool's energy (idle GPUs included, up to the last job's end) and the
# jobs' (their draw above idle: what modes and budgets change).
KEYS = (
    ("energy_kwh", "pool kWh"),
    ("job_energy_kwh", "jobs kWh"),
    ("peak_kw", "peak kW"),
    ("avg_jct_s", "mean JCT"),
    ("avg_queue_s", "mean queue"),
    ("p95_queue_s", "p95 queue"),
    ("power_capped_starts", "capped"),
    ("power_waited_jobs", "waited"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACES / "philly_pollux_jobs.csv")
    parser.add_argument("--window", default="2017-10-01,2017-10-04", help="a slice of the trace (dates)")
    parser.add_argument("--nodes", type=int, default=40, help="uniform nodes of 8 simulated H100s")
    parser.add_argument("--budgets", default="100,80,60", help="budgets in % of the cluster's peak")
    parser.add_argument("--efficient", type=float, default=0.5, help="the share of jobs at efficient, with modes")
    parser.add_argument(
        "--deferrable", type=float, default=0.3, help="the share of jobs that may wait for cleaner hours"
    )
    parser.add_argument("--defer", type=float, default=12.0, help="how long a deferrable job may wait, hours")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object per replay instead of a table")
    args = parser.parse_args()
    placement = SchedulerConfig().placement
    study = Study.prepare(args.trace, "philly", "default", placement, None, args.window, 1.0, None, 8)
    nodes = uniform(args.nodes, 8, "Simulated-H100")
    mixes = {"all max": {}, f"{args.efficient:.0%} efficient": {"max": 1 - args.efficient, "efficient": args.efficient}}
    print(f"{len(study.jobs):,} Philly jobs ({args.window}) on {args.nodes} nodes x 8 simulated H100s")
    if not args.json:
        print(f"{'modes':<16}{'budget':>8}" + "".join(f"{h:>12}" for _, h in KEYS) + f"{'wall s':>8}")
    for label, mix in mixes.items():
        jobs = assign_modes(study.jobs, mix, args.seed)
        for pct in (float(b) for b in args.budgets.split(",")):
            config = PowerConfig(budget_w=parse_budget(f"{pct:g}%", nodes, {}))
            _print(label, f"{pct:g}%", _run(replace(study, jobs=jobs), nodes, config), args.json)
    carbon = Signal(hourly=tuple(float(v) for v in CARBON_BY_HOUR))
    deferred = pick_deferrable(len(study.jobs), args.deferrable, args.seed)
    figures = {
        "default": _run(study, nodes, PowerConfig(carbon=carbon, deferrable=deferred, defer_s=args.defer * 3600)),
        "default (no deferral)": _run(study, nodes, PowerConfig(carbon=carbon)),
    }
    compare(figures)
    f, base = figures["default"], figures["default (no deferral)"]
    if args.json:
        print(json.dumps({"deferral": {k: v for k, v in f.items() if k != "per_project"}}))
        return
    print(
        f"deferral: {len(deferred):,} jobs ({args.deferrable:.0%}) may wait {args.defer:g} h for cleaner hours: "
        f"jobs' CO2 {base['job_co2_kg']:,.0f} -> {f['job_co2_kg']:,.0f} kg "
        f"(-{f['deferral_co2_saved_kg'] / base['job_co2_kg']:.1%}), mean queue "
        f"{base['avg_queue_s'] / 3600:.2f} -> {f['avg_queue_s'] / 3600:.2f} h, "
        f"mean JCT {base['avg_jct_s'] / 3600:.2f} -> {f['avg_jct_s'] / 3600:.2f} h"
    )


def _run(study: Study, nodes: Any, config: PowerConfig) -> dict[str, Any]:
    started = time.perf_counter()
    _, figures = study.run(nodes, "default", config)
    figures["wall_s"] = time.perf_counter() - started
    figures.pop("placed")
    return figures


def _print(modes: str, budget: str, figures: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(
            json.dumps({"modes": modes, "budget": budget, **{k: v for k, v in figures.items() if k != "per_project"}})
        )
        return
    cells = "".join(f"{figures[k] / 3600:>11.2f}h" if k.endswith("_s") else f"{figures[k]:>12,.0f}" for k, _ in KEYS)
    print(f"{modes:<16}{budget:>8}{cells}{figures['wall_s']:>8.1f}")


if __name__ == "__main__":
    main()

"""The contended Philly replay that ``org_tree.py`` and ``elastic.py`` share: two weeks of Helios'
window (2017-10-01 to 10-15) on 352 nodes x 8 GPUs, the 11 virtual clusters with their Helios
quotas, arrivals x 2.5 and durations x 2.573. One set of options, one way of loading it."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from gpupool.cli.simulate import Study
from gpupool.scheduler.config import SchedulerConfig
from gpupool.sim.trace_job import TraceJob

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly"


def parser(description: str) -> argparse.ArgumentParser:
    """The replay's options; a script adds its own."""
    made = argparse.ArgumentParser(description=description)
    made.add_argument("--trace", type=Path, default=TRACES / "philly_pollux_jobs.csv")
    made.add_argument("--vcs", type=Path, default=TRACES / "philly_vc_nodes_helios_qssf.csv", help="VC sizes")
    made.add_argument("--nodes", type=int, default=352)
    made.add_argument("--policy", default="default")
    made.add_argument("--window", default="2017-10-01,2017-10-15", help="Helios' Philly setup is 2017-10-01,2017-12-01")
    made.add_argument("--scale-load", type=float, default=2.5, help="arrivals this many times as frequent")
    made.add_argument("--duration-scale", type=float, default=2.573, help="run times multiplied by this")
    made.add_argument("--placement", default=SchedulerConfig().placement, help="placement (default: the head's)")
    return made


def load(args: argparse.Namespace) -> tuple[Study, list[TraceJob]]:
    """The study the options name, and its jobs with their run times scaled."""
    study = Study.prepare(
        args.trace, "philly", args.policy, args.placement, args.vcs, args.window, args.scale_load, None, 8
    )
    scale = args.duration_scale
    return study, [replace(j, duration=None if j.duration is None else j.duration * scale) for j in study.jobs]

"""Aging in a replay (issue 34 item 5): ``--max-wait`` bounds how long a big job waits behind a
favoured project's stream of small ones; without it the big job waits until the stream's
project falls behind, here two days."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpupool.domain.projects import Project
from gpupool.scheduler.policies import preset
from gpupool.sim.engine import SimResult, simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.trace import load
from tests.support.builders import node

HOUR = 3600
# A 2-GPU node (model S) and an 8-GPU one. other runs a 2-GPU job for two days on the small node
# and queues a 4-GPU one a minute later; fav (weight 8 of 10: far the larger share) fills six GPUs a
# second in, then queues a 1-GPU hour-long job every 10 minutes for two days, which keeps six busy. fav goes
# first whenever a GPU comes free, so four never are on one node.
HEADER = "job_id,submit_time,duration,gpus,workers,project,gpu_model"
ROWS = ["long,0,172800,2,1,other,S", "big,60,3600,4,1,other,"]
ROWS += [f"f{i},1,3600,1,1,fav," for i in range(6)] + [f"s{i},{i * 600},3600,1,1,fav," for i in range(1, 288)]
PROJECTS = [Project("fav", weight=8), Project("other"), Project("default")]
NODES = [node("a", 2, model="S"), node("b", 8)]


def replay(tmp_path: Path, max_wait_s: float) -> SimResult:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "\n" + "\n".join(ROWS) + "\n")
    return simulate(load(path), NODES, PROJECTS, replace(preset("default"), max_wait_s=max_wait_s))


def waits(result: SimResult) -> dict[str, float]:
    return {
        r.trace.job_id: r.first_start - r.trace.submit_time for r in result.runs.values() if r.first_start is not None
    }


def test_the_max_wait_bounds_the_big_jobs_wait_and_the_longest_wait_falls(tmp_path: Path) -> None:
    without, aged = waits(replay(tmp_path, 0)), waits(replay(tmp_path, 6 * HOUR))
    assert without["big"] >= 48 * HOUR - 60  # it starts only when other's long job ends
    assert 6 * HOUR <= aged["big"] <= 7 * HOUR  # at 6h it goes first; fav's jobs end within the hour
    assert max(aged.values()) < 7 * HOUR < max(without.values())
    assert len(aged) == len(without) == len(ROWS)  # every job ran in both


def test_simulate_takes_max_wait(tmp_path: Path) -> None:
    path, projects, cluster = tmp_path / "trace.csv", tmp_path / "projects.csv", tmp_path / "nodes.csv"
    path.write_text(HEADER + "\n" + "\n".join(ROWS) + "\n")
    projects.write_text("name,quota,limit,weight\nfav,0,,8\nother,0,,1\ndefault,0,,1\n")
    cluster.write_text("name,gpus,gpu_model\na,2,S\nb,8,Sim\n")
    cli = [sys.executable, "-m", "gpupool.cli.main", "simulate", str(path), "--cluster", str(cluster)]
    cli += ["--projects", str(projects), "-o", "json"]
    out = subprocess.run([*cli, "--max-wait", "6h"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    expected = summarize(replay(tmp_path, 6 * HOUR), 0.0)
    assert json.loads(out.stdout)["avg_queue_s"] == pytest.approx(expected["avg_queue_s"])  # the flag reaches it
    assert expected["avg_queue_s"] < summarize(replay(tmp_path, 0), 0.0)["avg_queue_s"] / 2
    out = subprocess.run([*cli, "--max-wait", "31d"], capture_output=True, text=True)
    assert out.returncode == 2 and "--max-wait must be between 0s and 30d" in out.stderr

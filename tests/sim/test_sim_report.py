"""The simulation report on small traces run through the real engine, two policies side by side,
with every row of jobs.csv worked out by hand."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from gpupool.domain.projects import Project
from gpupool.scheduler.policies import preset
from gpupool.sim.cluster import uniform
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.report import MAX_POINTS, _downsample, write_report
from gpupool.sim.trace import load

POLICIES = {"default": preset("default"), "greedy": preset("greedy")}
HEADER = "job_id,submit_time,duration,gpus,workers,project"
PNG = b"\x89PNG\r\n\x1a\n"
FILES = ["jobs.csv", "placed.csv", "summary.json", "queue_length.png", "gpu_utilization.png", "jct_cdf.png"]


def report(tmp_path: Path, rows: list[str], nodes: int, gpus: int, projects: list[Project] | None = None) -> list[Path]:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    results = {name: simulate(load(path), uniform(nodes, gpus), projects or [], c) for name, c in POLICIES.items()}
    figures = {name: summarize(r, 0.0) for name, r in results.items()}
    return write_report(tmp_path / "report", results, figures)


def rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_jobs_placed_summary_and_plots_of_a_reclaim_against_greedy(tmp_path: Path) -> None:
    # 2 nodes x 2 GPUs, a and b own 2 GPUs each. a fills the cluster (bin-packing puts a1 on one
    # node, a2's two 1-GPU workers on the other). default: b1 reclaims at 10 by preempting a2, the
    # youngest (started with a1, later id); b2 (b over quota) waits for b1's end at 60 and takes half
    # a GPU there, so a2 (two whole GPUs) restarts in full only when b2 ends at 90.
    # greedy never preempts: b1 and b2 wait for a's end at 100.
    paths = report(
        tmp_path,
        ["a1,0,100,2,1,a", "a2,0,100,1,2,a", "b1,10,50,2,1,b", "b2,20,30,0.5,1,b"],
        2,
        2,
        [Project("a", quota=2), Project("b", quota=2)],
    )
    out = tmp_path / "report"
    assert paths == [out / name for name in FILES]
    assert (out / "jobs.csv").read_text().splitlines() == [
        "policy,job_id,project,gpus,workers,submit_s,first_start_s,finish_s,queue_s,jct_s,preemptions",
        "default,a1,a,2,1,0,0,100,0,100,0",
        "default,a2,a,1,2,0,0,190,0,190,1",
        "default,b1,b,2,1,10,10,60,0,50,0",
        "default,b2,b,0.5,1,20,60,90,40,70,0",
        "greedy,a1,a,2,1,0,0,100,0,100,0",
        "greedy,a2,a,1,2,0,0,100,0,100,0",
        "greedy,b1,b,2,1,10,100,150,90,140,0",
        "greedy,b2,b,0.5,1,20,100,130,80,110,0",
    ]
    assert rows(out / "placed.csv") == [["policy", "job_id"]] + [
        [p, j] for p in ("default", "greedy") for j in ("a1", "a2", "b1", "b2")
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["default", "greedy"]
    assert "placed" not in summary["default"]
    assert (summary["default"]["preemptions"], summary["greedy"]["preemptions"]) == (1, 0)
    assert (summary["default"]["makespan_s"], summary["greedy"]["makespan_s"]) == (190, 150)
    for name in ("queue_length.png", "gpu_utilization.png", "jct_cdf.png"):
        assert_a_picture(out / name)


def test_a_job_that_never_started_or_never_finished_has_empty_cells(tmp_path: Path) -> None:
    report(tmp_path, ["forever,0,,1,1,default", "huge,5,10,16,1,default"], 1, 4)
    out = tmp_path / "report"
    for policy in POLICIES:
        assert [r for r in rows(out / "jobs.csv") if r[0] == policy] == [
            [policy, "forever", "default", "1", "1", "0", "0", "", "0", "", "0"],
            [policy, "huge", "default", "16", "1", "5", "", "", "", "", "0"],
        ]
    assert rows(out / "placed.csv") == [["policy", "job_id"], ["default", "forever"], ["greedy", "forever"]]
    assert_a_picture(out / "jct_cdf.png")  # no job finished: says so instead of an empty log axis


def test_a_long_timeline_is_binned_keeping_peaks_and_area(tmp_path: Path) -> None:
    t = np.arange(10 * MAX_POINTS, dtype=np.float64)
    v = np.zeros_like(t)
    v[1234] = 7.0  # one second-long burst
    x, peak = _downsample(t, v, "max")
    assert len(x) == MAX_POINTS + 1 and peak.max() == 7.0
    x, mean = _downsample(t, v, "mean")
    assert float(np.sum(mean[:-1] * np.diff(x))) == pytest.approx(7.0)  # the area under the step line


def assert_a_picture(path: Path) -> None:
    from matplotlib.image import imread

    assert path.read_bytes().startswith(PNG)
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 2  # more than a flat colour

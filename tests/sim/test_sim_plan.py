"""``gpupool plan`` and the trace-shaping options of ``gpupool simulate`` on traces small enough
to work out by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import load_projects, uniform
from gpupool.sim.engine import simulate
from gpupool.sim.plan import search
from gpupool.sim.trace import load
from gpupool.sim.workload import Window, scale_load, shuffle_arrivals

HEADER = "job_id,submit_time,duration,gpus"
CLI = [sys.executable, "-m", "gpupool.cli.main"]


def trace(tmp_path: Path, rows: list[str], name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


def four_at_once(tmp_path: Path) -> Path:
    # Four 1-GPU jobs of 100 s at t=0 on 1-GPU nodes: with n nodes the k-th job waits 100*(k//n).
    return trace(tmp_path, [f"j{i},0,100,1" for i in range(4)])


@pytest.mark.parametrize(("target", "answer", "probed"), [(50, 4, [2, 3, 4]), (150, 2, [1, 2, 4])])
def test_plan_finds_the_smallest_cluster_meeting_the_target(
    tmp_path: Path, target: float, answer: int, probed: list[int]
) -> None:
    jobs = load(four_at_once(tmp_path))
    found, curve = search(jobs, target, 1, "GPU", [], SchedulerConfig(), max_nodes=64)
    assert found == answer
    assert [p.nodes for p in curve] == probed  # from the mean load (4 nodes), then bisection
    assert all(p.meets == (p.nodes >= answer) for p in curve)
    by_nodes = {p.nodes: p for p in curve}
    assert by_nodes[4].p95_queue_s == 0
    if 2 in by_nodes and target > 100:
        assert by_nodes[2].p95_queue_s == 100 and not by_nodes[2].stopped_early


def test_a_hopeless_replay_stops_early_and_counts_as_a_miss(tmp_path: Path) -> None:
    jobs = load(trace(tmp_path, [f"j{i},0,100,1" for i in range(40)]))
    result = simulate(jobs, uniform(1, 1), give_up=(50.0, 2))
    assert result.stopped_early and sum(r.first_start is not None for r in result.runs.values()) < 5
    found, curve = search(jobs, 50, 1, "GPU", [], SchedulerConfig(), max_nodes=8)
    assert found is None and curve[-1].nodes == 8 and math.isinf(curve[0].p95_queue_s)


def test_plan_command_json_table_and_curve(tmp_path: Path) -> None:
    path = four_at_once(tmp_path)
    base = [*CLI, "plan", str(path), "--target-queue-p95", "2m", "--gpus-per-node", "1"]
    out = subprocess.run([*base, "-o", "json", "--report", str(tmp_path / "r")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert (got["nodes"], got["gpus"], got["target_queue_p95_s"]) == (2, 2, 120)
    assert {p["nodes"]: p["p95_queue_s"] for p in got["curve"]} == {1: None, 2: 100, 4: 0}
    assert (tmp_path / "r" / "curve.csv").read_text().splitlines()[1:] == ["1,1,,False", "2,2,100,True", "4,4,0,True"]
    assert (tmp_path / "r" / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = subprocess.run(base, capture_output=True, text=True)
    assert table.returncode == 0 and "2 nodes × 1 GPUs = 2 GPUs" in table.stdout
    for bad, message in [
        (["--target-queue-p95", "soon"], "malformed duration"),
        (["--target-queue-p95", "1h", "--policy", "fifo,default"], "single --policy"),
    ]:
        result = subprocess.run([*CLI, "plan", str(path), *bad], capture_output=True, text=True)
        assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_window_in_seconds_and_in_dates(tmp_path: Path) -> None:
    path = trace(tmp_path, ["a,100,10,1", "b,200,10,1", "c,3700,10,1"])
    jobs = load(path, window=Window.parse("100,1h"))  # [first+100 s, first+1 h) = [200, 3700)
    assert [(j.job_id, j.submit_time) for j in jobs] == [("b", 0)]
    jobs = load(path, window=Window.parse("100,2h"))  # times count from the window's start
    assert [(j.job_id, j.submit_time) for j in jobs] == [("b", 0), ("c", 3500)]
    assert [j.job_id for j in load(path, window=Window.parse(",150"))] == ["a", "b"]
    with pytest.raises(InvalidInput, match="seconds, not dates"):
        load(path, window=Window.parse("2017-10-01,2017-10-02"))
    philly = tmp_path / "philly.csv"
    philly.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-09-30 23:00:00,60,1,60,aa\n2017-10-01 01:00:00,60,2,120,bb\n2017-10-02 00:00:00,60,1,60,aa\n"
    )
    jobs = load(philly, window=Window.parse("2017-10-01,2017-10-02"))
    assert [(j.spec.project, j.submit_time, j.spec.gpus) for j in jobs] == [("vc-bb", 3600, 2)]
    assert Window.parse("2017-10-01,").start == datetime(2017, 10, 1)
    for bad in ["1h", "2h,1h", "2017-10-01,1h", "2017-13-01,"]:
        with pytest.raises(InvalidInput):
            Window.parse(bad)


def test_scale_load_and_seeded_arrival_order(tmp_path: Path) -> None:
    jobs = load(trace(tmp_path, ["a,0,10,1", "b,100,10,1", "c,100,10,1", "d,100,10,1", "e,300,10,1"]))
    assert [j.submit_time for j in scale_load(jobs, 2)] == [0, 50, 50, 50, 150]
    with pytest.raises(InvalidInput, match="must be > 0"):
        scale_load(jobs, 0)
    orders = {tuple(j.job_id for j in shuffle_arrivals(jobs, seed)) for seed in range(20)}
    assert all(o[0] == "a" and o[-1] == "e" and sorted(o[1:4]) == ["b", "c", "d"] for o in orders)
    assert len(orders) > 1  # ties are shuffled, differently per seed
    assert shuffle_arrivals(jobs, 7) == shuffle_arrivals(jobs, 7)
    study = load(trace(tmp_path, [f"p{i},{i},,1" for i in range(6)]))  # a placement study: nothing ends
    shuffled = shuffle_arrivals(study, 3)
    assert [j.submit_time for j in shuffled] == [0, 1, 2, 3, 4, 5]
    assert [j.job_id for j in shuffled] != [f"p{i}" for i in range(6)]


def test_helios_vc_sizes_as_projects(tmp_path: Path) -> None:
    path = tmp_path / "vc.csv"
    path.write_text("vc,node num\n6214e9,64\n103959,8\n")
    assert [(p.name, p.quota) for p in load_projects(path)] == [("vc-6214e9", 512), ("vc-103959", 64)]


def test_simulate_compares_policies_and_writes_a_report(tmp_path: Path) -> None:
    path = trace(tmp_path, ["a,0,100,2", "b,1,10,4", "c,2,100,2"])
    cmd = [*CLI, "simulate", str(path), "--nodes", "1", "--gpus-per-node", "4", "--policy", "fifo,greedy"]
    out = subprocess.run([*cmd, "-o", "json", "--report", str(tmp_path / "r")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert list(got) == ["fifo", "greedy"]
    assert (got["fifo"]["makespan_s"], got["greedy"]["makespan_s"]) == (210, 112)  # fifo: c waits behind b
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "gpu_utilization.png",
        "jct_cdf.png",
        "jobs.csv",
        "placed.csv",
        "queue_length.png",
        "summary.json",
    ]
    table = subprocess.run(cmd, capture_output=True, text=True)
    assert table.returncode == 0 and "FIFO" in table.stdout and "GREEDY" in table.stdout

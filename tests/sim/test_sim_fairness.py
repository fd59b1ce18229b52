"""Per-project figures and the cross-project fairness of a replay, on traces worked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app, main
from gpupool.domain.projects import Project
from gpupool.scheduler.policies import preset
from gpupool.sim.cluster import uniform
from gpupool.sim.engine import simulate
from gpupool.sim.fairness import jain
from gpupool.sim.metrics import summarize
from gpupool.sim.trace import load

HEADER = "job_id,submit_time,duration,gpus,workers,project"
# Two 4-GPU nodes, a and b a node each under partitions (a first: equal quotas go by name).
PARTITIONED = ["a1,0,100,4,1,a", "a2,0,50,4,1,a", "b1,10,10,1,1,b"]


def figures(tmp_path: Path, rows: list[str], nodes: int, policy: str, quotas: dict[str, float]) -> dict[str, object]:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    projects = [Project(name, quota=q) for name, q in quotas.items()]
    return summarize(simulate(load(path), uniform(nodes, 4), projects, preset(policy)), 0.0)


def test_partitions_treat_both_projects_as_entitled_though_b_needs_little(tmp_path: Path) -> None:
    got = figures(tmp_path, PARTITIONED, 2, "fifo-isolated", {"a": 4, "b": 4})
    # a2 waits for a1 on a's own node (b's node is idle from 20 s): waits 0 and 100, JCT 100 and 150.
    assert got["per_project"] == {
        "a": {
            "jobs": 2,
            "started": 2,
            "completed": 2,
            "avg_queue_s": 50.0,
            "p95_queue_s": 100.0,
            "avg_slowdown": 2.0,
            "entitled": 1.0,
        },
        "b": {
            "jobs": 1,
            "started": 1,
            "completed": 1,
            "avg_queue_s": 0.0,
            "p95_queue_s": 0.0,
            "avg_slowdown": 1.0,
            "entitled": 1.0,
        },
    }
    assert got["slowdown_fairness"] == pytest.approx(3**2 / (2 * (2**2 + 1**2)))  # 0.9
    assert got["queue_fairness"] == pytest.approx(50**2 / (2 * 50**2))  # 0.5: b never waits
    assert got["max_min_slowdown"] == pytest.approx(2.0)
    assert got["max_min_queue"] is None  # b's mean wait is 0
    # a holds its share (4 of its 8 wanted GPUs) whenever it wants any, b its one GPU while it
    # wants it: both 1, fair. Share-normalised allocation calls it unfair: b held 10 GPU-s of
    # a 4-GPU share over 150 s.
    assert got["entitled_fairness"] == pytest.approx(1.0)
    a, b = 600 / 150 / 4, 10 / 150 / 4
    assert got["fairness"] == pytest.approx((a + b) ** 2 / (2 * (a * a + b * b)))


def test_greedy_lets_a_take_b_s_share_and_the_entitled_index_says_so(tmp_path: Path) -> None:
    got = figures(tmp_path, ["a1,0,100,4,1,a", "b1,10,10,2,1,b"], 1, "greedy", {"a": 2, "b": 2})
    # a holds 4 GPUs against min(share 2, demand 4) = 2 for 100 s: 2.0. b wants 2 from 10 s,
    # holds 0 until 100, then 2 until 110: (0 x 90 + 1 x 10) / 100 = 0.1.
    assert got["entitled_fairness"] == pytest.approx(jain([2.0, 0.1]))
    assert got["entitled_fairness"] == pytest.approx(2.1**2 / (2 * (4 + 0.01)))
    rows = got["per_project"]
    assert isinstance(rows, dict)
    assert (rows["b"]["avg_queue_s"], rows["b"]["avg_slowdown"]) == (90.0, 10.0)
    assert (rows["a"]["entitled"], rows["b"]["entitled"]) == (pytest.approx(2.0), pytest.approx(0.1))
    assert got["slowdown_fairness"] == pytest.approx(11**2 / (2 * 101))
    assert got["max_min_slowdown"] == pytest.approx(10.0)


def test_jain_of_nothing_or_zeros_is_one_and_of_one_winner_is_one_over_n() -> None:
    assert jain([]) == 1.0 and jain([0.0, 0.0]) == 1.0
    assert jain([5.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_simulate_prints_and_emits_the_per_project_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join([HEADER, *PARTITIONED]) + "\n")
    quotas = tmp_path / "projects.csv"
    quotas.write_text("name,quota\na,4\nb,4\n")
    args = ["simulate", str(path), "--nodes", "2", "--gpus-per-node", "4", "--projects", str(quotas)]
    runner = CliRunner()
    out = runner.invoke(app, [*args, "--policy", "fifo-isolated", "-o", "json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["per_project"]["a"]["avg_queue_s"] == 50.0 and got["max_min_queue"] is None
    table = runner.invoke(app, [*args, "--policy", "fifo-isolated"])
    assert "fifo-isolated: per project" in table.output and "entitled_fairness" in table.output
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([*args, "--policy", "default", "--partition", "nodes"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --partition applies only to a policy that isolates projects (fifo-isolated), not default"
    ]


def test_a_project_whose_jobs_never_start_has_no_wait_rather_than_none(tmp_path: Path) -> None:
    # c has no quota, so under partitions no nodes: its job never starts and counts in no average.
    got = figures(tmp_path, [*PARTITIONED, "c1,0,10,1,1,c"], 2, "fifo-isolated", {"a": 4, "b": 4})
    rows = got["per_project"]
    assert isinstance(rows, dict)
    assert rows["c"] == {
        "jobs": 1,
        "started": 0,
        "completed": 0,
        "avg_queue_s": None,
        "p95_queue_s": None,
        "avg_slowdown": None,
        "entitled": None,  # no quota, so no fair share: min(share, demand) is 0 throughout
    }
    assert got["queue_fairness"] == pytest.approx(0.5) and got["slowdown_fairness"] == pytest.approx(0.9)

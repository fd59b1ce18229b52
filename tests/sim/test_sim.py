"""The simulator on small hand-made traces whose results are worked out by hand, and the loaders
on the first rows of the public traces."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.projects import Project
from gpupool.scheduler import SchedulerConfig
from gpupool.scheduler.policies import preset
from gpupool.sim.cluster import uniform
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.trace import fit_to_nodes, load

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
GREEDY = preset("greedy")


def trace(tmp_path: Path, rows: list[str], header: str = "job_id,submit_time,duration,gpus,workers,project") -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def run(
    path: Path, nodes: int, gpus: int, config: SchedulerConfig | None = None, projects: list[Project] | None = None
) -> dict[str, object]:
    result = simulate(load(path), uniform(nodes, gpus), projects or [], config)
    figures = summarize(result, 0.0)
    figures["runs"] = {r.trace.job_id: (r.first_start, r.finish, r.preemptions) for r in result.runs.values()}
    return figures


def test_a_big_job_first_in_line_then_the_rest_in_submit_order(tmp_path: Path) -> None:
    path = trace(tmp_path, ["A,0,100,4,1,default", "B,0,50,4,1,default", "C,10,10,1,1,default"])
    got = run(path, 1, 4)
    assert got["runs"] == {"A": (0, 100, 0), "B": (100, 150, 0), "C": (150, 160, 0)}
    assert (got["avg_jct_s"], got["makespan_s"], got["completed"]) == ((100 + 150 + 150) / 3, 160, 3)
    assert got["gpu_utilization"] == pytest.approx((4 * 100 + 4 * 50 + 1 * 10) / (4 * 160))
    assert got["avg_queue_s"] == pytest.approx((0 + 100 + 140) / 3)


def test_backfill_protects_the_waiting_big_job_where_greedy_lets_a_small_one_jump(tmp_path: Path) -> None:
    path = trace(tmp_path, ["A,0,100,2,1,default", "B,1,10,4,1,default", "C,2,100,2,1,default"])
    assert run(path, 1, 4)["runs"] == {"A": (0, 100, 0), "B": (100, 110, 0), "C": (110, 210, 0)}
    assert run(path, 1, 4, GREEDY)["runs"] == {"A": (0, 100, 0), "B": (102, 112, 0), "C": (2, 102, 0)}


def test_a_gang_waits_for_whole_nodes(tmp_path: Path) -> None:
    path = trace(tmp_path, ["A,0,50,1,1,default", "B,0,10,4,2,default"])
    assert run(path, 2, 4)["runs"] == {"A": (0, 50, 0), "B": (50, 60, 0)}


def test_fractions_pack_four_to_a_gpu(tmp_path: Path) -> None:
    path = trace(tmp_path, [f"J{i},0,100,0.25,1,default" for i in range(5)])
    got = run(path, 1, 1)
    starts = sorted(s for s, _, _ in got["runs"].values())  # type: ignore[union-attr]
    assert starts == [0, 0, 0, 0, 100]
    assert got["makespan_s"] == 200 and got["max_gpu_allocation"] == 1.0
    assert got["gpu_utilization"] == pytest.approx((4 * 0.25 * 100 + 0.25 * 100) / 200)


def test_borrowing_then_reclaim(tmp_path: Path) -> None:
    rows = [f"a{i},0,1000,1,1,a" for i in range(4)] + ["b0,10,100,1,1,b", "b1,10,100,1,1,b"]
    got = run(trace(tmp_path, rows), 1, 4, projects=[Project("a", quota=2), Project("b", quota=2)])
    runs = got["runs"]
    assert runs["b0"] == (10, 110, 0) and runs["b1"] == (10, 110, 0)  # b takes its quota back at once
    assert got["preemptions"] == 2
    preempted = sorted(k for k, (_, _, p) in runs.items() if p)  # type: ignore[union-attr]
    assert len(preempted) == 2 and all(runs[k][1] == 110 + 1000 for k in preempted)  # rerun in full
    assert got["makespan_s"] == 1110


def test_a_job_that_never_ends_and_one_that_never_fits(tmp_path: Path) -> None:
    got = run(trace(tmp_path, ["forever,0,,1,1,default", "huge,0,10,16,1,default"]), 1, 4)
    assert got["runs"] == {"forever": (0, None, 0), "huge": (None, None, 0)}
    assert got["placed"] == ["forever"] and got["completed"] == 0


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["A,0,10,1.5,1,default"], "trace.csv:2: gpus 1.5"),
        (["A,x,10,1,1,default"], "trace.csv:2"),
        (["A,0,-5,1,1,default"], "duration must be >= 0"),
    ],
)
def test_bad_rows_name_the_line(tmp_path: Path, rows: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        load(trace(tmp_path, rows))


def test_philly_loader_on_the_first_rows(tmp_path: Path) -> None:
    source = TRACES / "philly" / "philly_pollux_jobs.csv"
    if not source.exists():
        pytest.skip(f"the shared traces are not beside this checkout ({source})")
    head = tmp_path / "philly.csv"
    head.write_text("".join(source.read_text().splitlines(keepends=True)[:201]))
    jobs = load(head)
    assert len(jobs) == 200
    assert jobs[0].submit_time == 0 and all(a.submit_time <= b.submit_time for a, b in itertools.pairwise(jobs))
    assert all(j.spec.project.startswith("vc-") and j.duration and j.duration > 0 for j in jobs)
    big = [j for j in jobs if j.spec.workers > 1]
    assert all(j.spec.gpus == 8 for j in big)


def test_tiresias_jobs_become_gangs_of_whole_nodes_on_small_nodes() -> None:
    source = TRACES / "tiresias" / "60_job.csv"
    if not source.exists():
        pytest.skip(f"the shared traces are not beside this checkout ({source})")
    jobs = fit_to_nodes(load(source), 4)
    assert len(jobs) == 60
    assert sorted({(j.spec.gpus, j.spec.workers) for j in jobs}) == [(1.0, 1), (2.0, 1), (4.0, 1), (4.0, 2)]
    result = summarize(simulate(jobs, uniform(16, 4)), 0.0)
    assert result["completed"] == 60


SIM_FIELDS = {
    "jobs",
    "completed",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "p95_queue_s",
    "makespan_s",
    "gpu_utilization",
    "max_gpu_allocation",
    "preemptions",
    "preempted_jobs",
    "most_preemptions",
    "fairness",
    "wall_s",
    "placed",
}


def test_simulate_command_json_and_table(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    path = trace(tmp_path, ["A,0,100,4,1,default", "B,0,50,4,1,default", "C,10,10,1,1,default"])
    cli = [sys.executable, "-m", "gpupool.cli.main", "simulate", str(path)]
    out = subprocess.run([*cli, "--nodes", "1", "--gpus-per-node", "4", "-o", "json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert set(figures) >= SIM_FIELDS
    assert (figures["completed"], figures["makespan_s"], figures["placed"]) == (3, 160, ["A", "B", "C"])
    table = subprocess.run([*cli, "--nodes", "1", "--policy", "greedy"], capture_output=True, text=True)
    assert table.returncode == 0 and "GREEDY" in table.stdout and "gpu_utilization" in table.stdout
    for bad, message in [
        (["--policy", "magic"], "unknown policy"),
        ([], "give the cluster"),
        (["--nodes", "0"], "--nodes must be >= 1"),
        (["--nodes", "1", "--reclaim-min-run", "2d"], "--reclaim-min-run must be between 0s and 1d"),
        (["--nodes", "1", "--reclaim-min-run", "soon"], "malformed duration 'soon'"),
    ]:
        result = subprocess.run([*cli, *bad], capture_output=True, text=True)
        assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_fifo_ignores_priority_classes_and_blocks_behind_the_head(tmp_path: Path) -> None:
    header = "job_id,submit_time,duration,gpus,workers,project,priority"
    rows = ["A,0,10,1,1,default,train", "B,1,10,1,1,default,train", "C,2,10,1,1,default,interactive"]
    path = trace(tmp_path, rows, header)
    fifo = preset("fifo")
    assert run(path, 1, 1, fifo)["runs"] == {"A": (0, 10, 0), "B": (10, 20, 0), "C": (20, 30, 0)}
    # default: the interactive job displaces the train job of its project at once, which reruns
    got = run(path, 1, 1)
    assert got["runs"] == {"A": (0, 22, 1), "B": (22, 32, 0), "C": (2, 12, 0)}
    blocking = trace(tmp_path, ["A,0,100,2,1,default", "B,1,10,4,1,default", "C,2,100,2,1,default"])
    assert run(blocking, 1, 4, fifo)["runs"] == {"A": (0, 100, 0), "B": (100, 110, 0), "C": (110, 210, 0)}


def test_fifo_blocks_behind_a_fraction_but_not_behind_a_job_that_never_fits(tmp_path: Path) -> None:
    fifo = preset("fifo")
    rows = ["A,0,100,0.5,1,default", "B,0,100,0.75,1,default", "C,1,10,0.25,1,default"]
    assert run(trace(tmp_path, rows), 1, 1, fifo)["runs"] == {"A": (0, 100, 0), "B": (100, 200, 0), "C": (100, 110, 0)}
    rows = ["huge,0,10,8,1,default", "A,1,10,1,1,default"]
    assert run(trace(tmp_path, rows), 1, 4, fifo)["runs"] == {"huge": (None, None, 0), "A": (1, 11, 0)}


def test_fifo_isolated_confines_each_project_to_its_quota_and_blocks_only_its_own_queue(tmp_path: Path) -> None:
    isolated = preset("fifo-isolated", partition="gpus")  # quota in GPUs on the one node
    rows = [
        "a1,0,100,2,1,a",
        "a2,0,10,1,1,a",  # a's 2 GPUs are taken: waits although b's are free
        "a3,1,10,1,1,a",  # behind a2 in a's queue
        "b1,5,50,2,1,b",
        "b2,5,10,1,1,b",
        "a-too-big,6,10,4,1,a",  # more than a's quota: never runs, blocks nothing
    ]
    projects = [Project("a", quota=2), Project("b", quota=2)]
    got = run(trace(tmp_path, rows), 1, 4, isolated, projects)
    assert got["runs"] == {
        "a1": (0, 100, 0),
        "a2": (100, 110, 0),
        "a3": (100, 110, 0),
        "b1": (5, 55, 0),
        "b2": (55, 65, 0),
        "a-too-big": (None, None, 0),
    }
    borrowing = run(trace(tmp_path, rows[:5]), 1, 4, GREEDY, projects)["runs"]
    assert borrowing["a2"] == (0, 10, 0) and borrowing["a3"] == (1, 11, 0)  # greedy borrows b's idle GPUs


def test_a_minimum_run_delays_reclaim_until_it_is_reached_not_until_the_next_event(tmp_path: Path) -> None:
    """b1 (within b's quota) arrives at 10 while a's a2 borrows b's GPUs: reclaimed at once by
    default; with a 30 s minimum at 30, the time the replay wakes for (nothing arrives or ends
    then: without the wake, b1 would wait for a's jobs to end at 100)."""
    path = trace(tmp_path, ["a1,0,100,2,1,a", "a2,0,100,1,2,a", "b1,10,50,2,1,b"])
    projects = [Project("a", quota=2), Project("b", quota=2)]
    now = run(path, 2, 2, preset("default"), projects)["runs"]
    assert now["b1"] == (10, 60, 0) and now["a2"][2] == 1  # type: ignore[index]
    later = run(path, 2, 2, replace(preset("default"), reclaim_min_run_s=30.0), projects)["runs"]
    assert later["b1"] == (30, 80, 0) and later["a2"] == (0, 180, 1)  # a2 restarts from scratch at 80
    quotas = tmp_path / "projects.csv"
    quotas.write_text("name,quota\na,2\nb,2\n")
    cli = [sys.executable, "-m", "gpupool.cli.main", "simulate", str(path), "--nodes", "2", "--gpus-per-node", "2"]
    out = subprocess.run(
        [*cli, "--projects", str(quotas), "--reclaim-min-run", "30s", "-o", "json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert figures["makespan_s"] == 180  # as the replay above: the flag reaches the scheduler
    assert (figures["preemptions"], figures["preempted_jobs"], figures["most_preemptions"]) == (1, 1, 1)

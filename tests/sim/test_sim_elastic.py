"""Elastic jobs in the simulator (issue 35): the speed model, the engine carrying out grows and
shrinks (with scripted cycles: the decisions are given, the replay's bookkeeping is what is
checked), the trace's ``min_workers`` column and ``gpupool simulate --elastic``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app, main
from gpupool.domain.decisions import CycleResult, GrowJob, Preempt, ShrinkJob, StartJob
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.snapshot import Snapshot
from gpupool.scheduler import SchedulerConfig
from gpupool.sim import elastic
from gpupool.sim.cluster import uniform
from gpupool.sim.engine import EPOCH, SimResult, simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.trace import TraceJob, load

NODES = uniform(1, 4)


def on(*gpus: int, first: int = 0) -> tuple[Placement, ...]:
    """One worker per GPU of node-1, numbered from ``first``."""
    return tuple(Placement(first + i, "node-1", (g,)) for i, g in enumerate(gpus))


def at(t: float) -> Any:
    return EPOCH + timedelta(seconds=t)


@dataclass
class Script:
    """A scheduler that says what it was told to, in order: each entry is the decision of the
    first cycle at its time; any other cycle decides nothing. It keeps the snapshots it saw."""

    steps: list[tuple[float, CycleResult]]
    seen: list[Snapshot] = field(default_factory=list)

    def __call__(self, snapshot: Snapshot, config: SchedulerConfig | None = None, **_: Any) -> CycleResult:
        self.seen.append(snapshot)
        if self.steps and at(self.steps[0][0]) == snapshot.now:
            return self.steps.pop(0)[1]
        return CycleResult()

    def running_at(self, t: float, job_id: int) -> list[tuple[int, Any]]:
        """(width, oracle end) of a running job in each snapshot at ``t``."""
        return [
            (len(r.placements), r.oracle_end) for s in self.seen if s.now == at(t) for r in s.running if r.id == job_id
        ]


def job(name: str, submit: float, duration: float, workers: int | str = 1, **spec: Any) -> TraceJob:
    return TraceJob(name, submit, duration, JobSpec.create(command=("sim",), name=name, workers=workers, **spec))


def replay(jobs: Sequence[TraceJob], script: Script, alpha: float = 1.0) -> SimResult:
    result = simulate(jobs, NODES, elastic_alpha=alpha, decide=script)
    assert not script.steps, f"steps never reached: {script.steps}"
    return result


def test_the_speed_model_is_width_over_full_width_to_the_alpha() -> None:
    spec = JobSpec.create(command=("x",), workers="2:8")
    assert elastic.speed(spec, 8) == 1.0
    assert elastic.speed(spec, 4) == pytest.approx(0.5**0.8)
    assert elastic.speed(spec, 2, alpha=1.0) == 0.25
    assert elastic.speed(spec, 2, alpha=0.0) == 1.0
    assert elastic.speed(JobSpec.create(command=("x",), workers=4), 4) == 1.0  # a rigid gang runs at full width


def test_an_elastic_job_at_its_minimum_runs_slower_by_the_speed_model() -> None:
    script = Script([(0, CycleResult(starts=(StartJob(1, on(0, 1)),)))])
    result = replay([job("e", 0, 100, "2:4")], script, alpha=0.8)
    assert result.runs[1].finish == pytest.approx(100 / 0.5**0.8)  # 174.1 s: 2 of 4 workers, sublinear
    assert result.allocation_by_project["default"] == pytest.approx(2 * 100 / 0.5**0.8)


def test_a_grow_and_a_shrink_recompute_the_end_from_the_work_left_and_the_gpus_follow_the_width() -> None:
    # alpha 1: at 2 of 4 workers half speed. 0-50 s on 2 (25 s of work), 50-75 s on 4 (25 s more),
    # then shrunk to 2 for w, which waits: the last 50 s of work at half speed end at 175 s.
    script = Script(
        [
            (0, CycleResult(starts=(StartJob(1, on(0, 1)),), wake_at=at(50))),
            (50, CycleResult(grows=(GrowJob(1, on(2, 3, first=2), "grew to 4 workers"),))),
            (75, CycleResult(shrinks=(ShrinkJob(1, (2, 3), "shrank to 2 workers", for_job=2),))),
            (75, CycleResult(starts=(StartJob(2, on(2, 3)),))),  # the next round, the GPUs free
        ]
    )
    result = replay([job("e", 0, 100, "2:4"), job("w", 75, 10, 2)], script)
    assert script.running_at(50, 1) == [(2, at(200))]  # before the grow: 100 s of work at half speed
    assert script.running_at(75, 1) == [(4, at(125)), (2, at(175))]  # grown, then shrunk
    assert (result.runs[1].finish, result.runs[2].finish) == (175, 85)
    assert result.allocation_by_project["default"] == 2 * 50 + 4 * 25 + 2 * 100 + 2 * 10
    figures = summarize(result, 0.0)
    assert figures["gpu_utilization"] == pytest.approx(420 / (4 * 175))


def test_a_preempted_elastic_job_keeps_the_gpu_seconds_of_each_width() -> None:
    script = Script(
        [
            (0, CycleResult(starts=(StartJob(1, on(0, 1)),), wake_at=at(10))),
            (10, CycleResult(grows=(GrowJob(1, on(2, 3, first=2), "grew"),))),
            (20, CycleResult(preemptions=(Preempt(1, "for w", 2),))),
        ]
    )
    result = replay([job("e", 0, 100, "2:4", checkpoint_dir="/ckpt"), job("w", 20, 10, 4)], script)
    assert result.runs[1].attained == 2 * 10 + 4 * 10
    (requeued,) = [p for s in script.seen if s.now == at(20) for p in s.pending if p.id == 1]
    assert requeued.attained == 60 and requeued.oracle_remaining_s == 100  # 15 s of work: less than the resume loss


def test_a_resize_outside_the_jobs_range_is_a_bug_the_replay_refuses() -> None:
    script = Script(
        [
            (0, CycleResult(starts=(StartJob(1, on(0, 1)),), wake_at=at(5))),
            (5, CycleResult(grows=(GrowJob(1, on(2, 3, first=2), "past its maximum"),))),
        ]
    )
    with pytest.raises(ValueError, match=r"job 1 \(2:3 workers\) cannot go from 2 to 4"):
        simulate([job("e", 0, 100, "2:3")], NODES, decide=script)


def test_traces_without_elastic_jobs_replay_as_before() -> None:
    """The default scheduler, a rigid trace: the same answer with any alpha (rigid gangs run at full width)."""
    jobs = [job("a", 0, 100, 2), job("b", 5, 50, 4), job("c", 10, 30)]
    runs = [simulate(jobs, NODES, elastic_alpha=a).runs for a in (0.0, 0.8, 1.0)]
    finishes = [[r.finish for r in one.values()] for one in runs]
    assert finishes[0] == finishes[1] == finishes[2] == [100, 150, 180]


def test_the_min_workers_column_makes_a_job_elastic(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,duration,gpus,workers,min_workers\ne,0,100,2,8,2\ng,0,100,2,4,\nr,0,10,1,4,4\n")
    specs = {j.job_id: j.spec for j in load(path)}
    assert (specs["e"].workers, specs["e"].max_workers) == (2, 8)
    assert (specs["g"].workers, specs["g"].max_workers) == (4, None)  # empty: a rigid gang
    assert (specs["r"].workers, specs["r"].max_workers) == (4, None)  # 4:4 is just 4
    path.write_text("job_id,submit_time,duration,gpus,workers,min_workers\ne,0,100,2,2,8\n")
    with pytest.raises(InvalidInput, match=r"t.csv:2: min_workers 8 is above workers 2"):
        load(path)


@pytest.mark.parametrize(
    ("fraction", "widths"),
    [(0.5, [(1, None), (1, 2), (2, 3), (4, 8)]), (0.25, [(1, None), (1, 2), (1, 3), (2, 8)]), (1.0, [])],
)
def test_elastic_marks_multi_worker_jobs_with_a_minimum_of_their_width(
    fraction: float, widths: list[tuple[int, int | None]]
) -> None:
    jobs = [job(f"j{w}", 0, 10, w) for w in (1, 2, 3, 8)]
    got = [(j.spec.workers, j.spec.max_workers) for j in elastic.make_elastic(jobs, fraction)]
    assert got == (widths or [(1, None), (2, None), (3, None), (8, None)])  # 1.0: every job stays rigid


def test_simulate_elastic_half_replays_the_multi_worker_jobs_elastic(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,duration,gpus,workers\nbig,0,100,1,4\nsmall,0,100,1,1\n")
    args = ["simulate", str(path), "--nodes", "1", "--gpus-per-node", "4", "-o", "json"]
    rigid = json.loads(CliRunner().invoke(app, args).output)
    half = CliRunner().invoke(app, [*args, "--elastic", "half", "--elastic-alpha", "1"])
    assert half.exit_code == 0, half.output
    got = json.loads(half.output)
    # Rigid, the one-worker job waits for the 4-worker one (or the other way round). Elastic, the
    # big one starts at its minimum of 2 beside it and grows at once into the GPU left: 3 of 4
    # workers do 75 s of its 100 s of work by t=100, when the small one ends and it grows to 4 for
    # the last 25 s. Nobody waits, every GPU is busy, and it all ends at 125 s.
    assert (rigid["avg_queue_s"], rigid["makespan_s"]) == (50, 200)
    assert (got["avg_queue_s"], got["makespan_s"], got["completed"]) == (0, 125, 2)
    assert got["gpu_utilization"] == pytest.approx(1.0)


def test_plan_sizes_a_smaller_cluster_for_elastic_gangs(tmp_path: Path) -> None:
    # One GPU a node and no waiting allowed: rigid, the 4-worker job and the 1-worker one start
    # together only on 5 nodes; elastic from half, the big one starts on 2 beside the small one: 3.
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,duration,gpus,workers\nbig,0,100,1,4\nsmall,0,100,1,1\n")
    args = ["plan", str(path), "--target-queue-p95", "0s", "--gpus-per-node", "1", "-o", "json"]
    rigid = CliRunner().invoke(app, args)
    elastic_run = CliRunner().invoke(app, [*args, "--elastic", "half"])
    assert rigid.exit_code == elastic_run.exit_code == 0, (rigid.output, elastic_run.output)
    assert (json.loads(rigid.output)["nodes"], json.loads(elastic_run.output)["nodes"]) == (5, 3)
    with pytest.raises(SystemExit) as exited:
        main([*args, "--elastic", "most"])
    assert exited.value.code == 2


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (["--elastic", "most"], "--elastic 'most': give half or a fraction of a job's width above 0 and at most 1"),
        (["--elastic", "0"], "--elastic '0': give half"),
        (["--elastic", "1.5"], "--elastic '1.5': give half"),
        (["--elastic", "half", "--elastic-alpha", "2"], "--elastic-alpha 2: give an exponent from 0"),
    ],
)
def test_bad_elastic_options_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: list[str], message: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,duration,gpus,workers\nbig,0,100,1,4\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["simulate", str(path), "--nodes", "1", *bad])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert message in line

"""The least-attained order (``las``): queues by GPU-seconds received, promotion of a job that
starves, displacement bounded by a minimum run, within quotas; and the simulator-only oracle."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import SchedulerConfig, schedule
from gpupool.scheduler.config import LasConfig
from gpupool.scheduler.plugins.las import queue_of
from gpupool.scheduler.policies import POLICIES, for_head
from gpupool.settings import Settings
from gpupool.sim.cluster import uniform
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.trace_job import TraceJob
from tests.support.builders import T0, node, pending, running, snapshot

LAS = POLICIES["las"]
FIFO = POLICIES["fifo-share"]  # the default before las
HOUR = 3600.0


@pytest.mark.parametrize(
    ("attained", "gpus", "max_runtime_s", "queue"),
    [
        (0.0, 1, None, 0),
        (3_599.0, 1, None, 0),
        (3_600.0, 1, None, 1),  # a threshold passed is a queue lower
        (35_999.0, 8, None, 1),
        (40_000.0, 8, None, 2),
        (50_000.0, 1, 1_800, 0),  # --max-runtime: it ends before it could pass the first threshold
        (50_000.0, 1, 3_600, 0),  # ... or as it reaches it
        (50_000.0, 2, 3_600, 1),  # 2 GPUs x 1 h pass the first threshold, not the second
    ],
)
def test_a_job_queue_is_the_thresholds_its_gpu_seconds_passed_capped_by_its_max_runtime(
    attained: float, gpus: float, max_runtime_s: int | None, queue: int
) -> None:
    assert queue_of(attained, gpus, max_runtime_s, LasConfig()) == queue


def waited(job: PendingJob, attained: float, since_s: float) -> PendingJob:
    """``job`` after earlier runs gave it ``attained`` GPU-seconds; waiting again ``since_s`` before T0."""
    return replace(job, attained=attained, waiting_since=T0 - timedelta(seconds=since_s))


def ran(job: RunningJob, seconds: float, attained: float = 0.0, checkpoint: str | None = "/ckpt") -> RunningJob:
    """``job`` ``seconds`` into its current run, after earlier runs gave it ``attained``; it
    checkpoints unless told (only such jobs are displaced)."""
    spec = replace(job.spec, checkpoint_dir=checkpoint)
    return replace(job, spec=spec, started_at=T0 - timedelta(seconds=seconds), attained=attained)


def test_the_job_with_less_service_goes_first_where_fifo_takes_the_earlier() -> None:
    earlier = waited(pending(1, gpus=4), attained=4 * 2 * HOUR, since_s=60)  # 2 h on 4 GPUs before
    later = pending(2, gpus=4)
    nodes = [node("n1", 4)]
    assert [s.job_id for s in schedule(snapshot(nodes, [earlier, later]), FIFO).starts] == [1]
    assert [s.job_id for s in schedule(snapshot(nodes, [earlier, later]), LAS).starts] == [2]


def test_a_job_that_waited_longer_than_promote_after_times_its_run_goes_back_to_queue_0() -> None:
    nodes = [node("n1", 4)]
    starving = waited(pending(1, gpus=4), attained=4 * HOUR, since_s=4 * HOUR + 1)  # ran 1 h, waits 4 h
    assert [s.job_id for s in schedule(snapshot(nodes, [starving, pending(2, gpus=4)]), LAS).starts] == [1]
    patient = waited(pending(1, gpus=4), attained=4 * HOUR, since_s=4 * HOUR - 60)
    assert [s.job_id for s in schedule(snapshot(nodes, [patient, pending(2, gpus=4)]), LAS).starts] == [2]


@pytest.mark.parametrize(
    ("run_s", "attained", "max_runtime_s", "displaced"),
    [
        (2 * HOUR, 0.0, None, True),  # 2 h on 1 GPU: queue 1, behind a new job
        (0.5 * HOUR, 0.0, None, False),  # still in queue 0, as the waiting job
        (300.0, 10 * HOUR, None, False),  # queue 2, but not min_run_s into its current run yet
        (2 * HOUR, 0.0, 3 * 3600, True),  # its --max-runtime passes 3,600 GPU-seconds: no ceiling
        (0.7 * HOUR, 2 * HOUR, 3000, False),  # it ends before its first threshold: never sinks
    ],
)
def test_a_waiting_job_displaces_a_running_one_of_a_later_queue_within_the_bounds(
    run_s: float, attained: float, max_runtime_s: int | None, displaced: bool
) -> None:
    busy = ran(running(9, ("n1", (0,)), max_runtime_s=max_runtime_s), run_s, attained)
    result = schedule(snapshot([node("n1", 1)], [pending(1)], [busy]), LAS)
    assert [p.job_id for p in result.preemptions] == ([9] if displaced else [])
    assert schedule(snapshot([node("n1", 1)], [pending(1)], [busy]), FIFO).preemptions == ()  # no displacing
    if displaced:
        assert "las order" in result.preemptions[0].message
        assert "displacing 1 job(s)" in result.pending[1].message


def test_displacing_keeps_each_project_its_quota_and_takes_from_the_richer_project_only() -> None:
    projects = [Project("a", quota=4), Project("b", quota=4)]
    long_a = [ran(running(10 + i, ("n1", (i,)), project="a"), 2 * HOUR) for i in range(4)]
    long_b = [ran(running(20 + i, ("n2", (i,)), project="b"), 2 * HOUR) for i in range(4)]
    # Each holds its quota: b's new job may not take a's GPUs, only b's own.
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, project="b")], long_a + long_b, projects), LAS)
    assert [p.job_id for p in result.preemptions] == [20]  # alike: the first to reach its queue (by id)
    # a borrows 4 of b's quota (b idle): b's job takes one of a's borrowed GPUs back, a keeps its 4.
    long_a += [ran(running(30 + i, ("n2", (i,)), project="a"), 2 * HOUR) for i in range(4)]
    wave = [pending(i, project="b") for i in range(1, 7)]
    result = schedule(snapshot([node("n1"), node("n2")], wave, long_a, projects), LAS)
    taken = sorted(p.job_id for p in result.preemptions)
    assert len(taken) == 4 and all(30 <= j < 40 or 10 <= j < 14 for j in taken)
    assert sum(1 for j in taken if 10 <= j < 14) == 0  # a keeps its quota: only borrowed GPUs go


@pytest.mark.parametrize(("waiting_project", "displaced"), [("a", True), ("z", False)])
def test_a_job_displaces_another_project_only_where_it_goes_first_in_the_next_cycle(
    waiting_project: str, displaced: bool
) -> None:
    """Neither project has a share (no quotas listed): the two rank alike once b's job stops,
    and the name settles it. z would displace b's job only for b to come first next cycle and
    restart it on the GPU z waits for (the replay then looped for ever), so it does not; a does."""
    busy = ran(running(9, ("n1", (0,)), project="b"), 2 * HOUR)
    snap = snapshot([node("n1", 1)], [pending(1, project=waiting_project)], [busy])
    result = schedule(snap, LAS)
    assert [p.job_id for p in result.preemptions] == ([9] if displaced else [])
    if displaced:  # the next cycle: b's job waits again, a's starts on the GPU it freed
        requeued = waited(pending(9, project="b"), attained=2 * HOUR, since_s=0)
        after = schedule(snapshot([node("n1", 1)], [pending(1, project="a"), requeued]), LAS)
        assert [s.job_id for s in after.starts] == [1]


def test_a_short_job_no_longer_waits_behind_long_ones_in_a_replay() -> None:
    def spec(gpus: float) -> JobSpec:
        return JobSpec(command=("x",), project="a", gpus=gpus, checkpoint_dir="/ckpt")

    jobs = [TraceJob(f"long{i}", 0.0, 50_000.0, spec(8)) for i in range(2)]
    jobs += [TraceJob(f"short{i}", 1_000.0 + 100 * i, 300.0, spec(4)) for i in range(10)]
    figures = {}
    for name in ("fifo-share", "las", "srtf-oracle"):
        result = simulate(jobs, uniform(2, 8), [Project("a", 16.0)], POLICIES[name])
        figures[name] = summarize(result, 0.0)
        assert figures[name]["completed"] == len(jobs)
    assert figures["fifo-share"]["avg_queue_s"] > 40_000  # the short jobs wait for a long one to end
    assert figures["las"]["avg_queue_s"] == pytest.approx(0.0)  # they displace the long ones at once
    assert figures["las"]["preemptions"] == 2
    # The long jobs resume (less a minute) rather than start over: their work is not lost.
    long_jct = max(r.finish - r.trace.submit_time for r in result.runs.values() if r.finish is not None)
    assert long_jct < 50_000 + 10 * 300 + 2 * 60 + 1
    assert figures["las"]["avg_jct_s"] <= figures["fifo-share"]["avg_jct_s"] / 5
    assert POLICIES["default"] == LAS


def test_a_preempted_job_keeps_its_service_in_the_replay() -> None:
    jobs = [
        TraceJob("long", 0.0, 10 * HOUR, JobSpec(command=("x",), gpus=2)),  # no checkpoint: starts over
        TraceJob("short", 2 * HOUR, 60.0, JobSpec(command=("x",), gpus=2)),
    ]
    result = simulate(jobs, uniform(1, 2), (), replace(LAS, las=LasConfig(checkpointed_only=False)))
    long = result.runs[1]
    assert long.preemptions == 1 and long.attained == pytest.approx(2 * 2 * HOUR)
    assert long.finish == pytest.approx(2 * HOUR + 60 + 10 * HOUR)  # its whole duration again


@pytest.mark.parametrize("max_runtime_s", [None, 3 * 3600])
def test_a_job_without_a_checkpoint_is_not_displaced_unless_configured(max_runtime_s: int | None) -> None:
    # A --max-runtime past the first threshold does not make it displaceable (it once did: the
    # ceiling its --max-runtime sets replaced the one its missing checkpoint set).
    busy = ran(running(9, ("n1", (0,)), max_runtime_s=max_runtime_s), 2 * HOUR, checkpoint=None)
    snap = snapshot([node("n1", 1)], [pending(1)], [busy])
    assert schedule(snap, LAS).preemptions == ()
    anyway = replace(LAS, las=LasConfig(checkpointed_only=False))
    assert [p.job_id for p in schedule(snap, anyway).preemptions] == [9]


def test_min_run_share_lets_a_job_that_ran_long_before_run_longer_before_it_is_displaced_again() -> None:
    busy = ran(running(9, ("n1", (0,))), HOUR, attained=10 * HOUR)  # ran 10 h before, 1 h now
    snap = snapshot([node("n1", 1)], [pending(1)], [busy])
    assert [p.job_id for p in schedule(snap, LAS).preemptions] == [9]
    patient = replace(LAS, las=LasConfig(min_run_share=0.5))  # 5 h before it may go again
    assert schedule(snap, patient).preemptions == ()


def test_the_oracle_is_for_the_simulator_only() -> None:
    with pytest.raises(InvalidInput, match="only a simulated trace knows"):
        for_head("srtf-oracle")
    with pytest.raises(InvalidInput, match="only a simulated trace knows"):
        _ = Settings(Path("/x"), policy="srtf-oracle").scheduler_config
    assert for_head("las") == LAS
    with pytest.raises(InvalidInput, match="only a simulator knows"):
        schedule(snapshot([node("n1")], [pending(1)]), POLICIES["srtf-oracle"])


def test_the_oracle_runs_the_shortest_remaining_first() -> None:
    jobs = [replace(pending(i, gpus=4), oracle_remaining_s=r) for i, r in ((1, 900.0), (2, 60.0), (3, 300.0))]
    assert [s.job_id for s in schedule(snapshot([node("n1", 4)], jobs), POLICIES["srtf-oracle"]).starts] == [2]


def test_las_thresholds_must_ascend() -> None:
    config = replace(LAS, las=LasConfig(thresholds=(100.0, 10.0)))
    with pytest.raises(InvalidInput, match="ascending"):
        schedule(snapshot([node("n1")], [pending(1)]), config)
    assert isinstance(SchedulerConfig().las, LasConfig)


TREE = [
    Project("cs", quota=4),
    Project("vision", quota=2, parent="cs"),
    Project("nlp", quota=2, parent="cs"),
    Project("bio", quota=4),
    Project("genome", quota=2, parent="bio"),
    Project("protein", quota=2, parent="bio"),
]


def test_displacing_in_a_tree_keeps_every_level_its_quota() -> None:
    # vision holds its quota (young jobs) and wants more; nlp holds its own quota, and bio its
    # quota with genome borrowing protein's part inside it. genome's own quota of 2 would let it
    # give up 2 GPUs, but that would take bio below its quota: nobody is displaced.
    jobs = [ran(running(10 + i, ("n1", (i,)), project="genome"), 2 * HOUR) for i in range(4)]
    jobs += [ran(running(20 + i, ("n2", (i,)), project="nlp"), 1.5 * HOUR) for i in range(2)]
    jobs += [ran(running(30 + i, ("n2", (2 + i,)), project="vision"), 600) for i in range(2)]
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, project="vision")], jobs, TREE), LAS)
    assert result.preemptions == ()
    # With bio beyond its quota (protein's part left to the root), genome's borrowed GPU goes.
    wider = [p if p.name != "bio" else Project("bio", quota=2) for p in TREE if p.name != "protein"]
    wider = [p if p.name != "cs" else Project("cs", quota=6) for p in wider]
    result = schedule(snapshot([node("n1"), node("n2")], [pending(1, project="vision")], jobs, wider), LAS)
    owner = {r.id: r.spec.project for r in jobs}
    assert [owner[p.job_id] for p in result.preemptions] == ["genome"]

"""A real controller over a real store, a fake executor with simulated GPUs and a virtual clock:
every ``telemetry_every_s`` it reads every node that is not down, telling each which GPUs its live
workers hold, and writes the readings; a node that cannot be read never stops the loop."""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import timedelta

import pytest

from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.nodes import Node
from gpupool.domain.telemetry import GpuSample
from gpupool.store import telemetry as telemetry_repo
from gpupool.store.db import Database
from gpupool.usecases import jobs as job_service
from tests.support.executor import USER, FakeExecutor
from tests.support.harness import Harness


def test_every_node_is_read_as_often_as_asked_with_the_gpus_its_jobs_hold(db: Database) -> None:
    h = Harness(db)
    h.tick()  # the first cycle reads at once; nothing runs yet
    assert h.executor.sampled == [("node-1", frozenset()), ("node-2", frozenset())]
    job = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=2), USER)
    for _ in range(4):
        h.tick()  # the job starts; no reading is due
    assert len(h.executor.sampled) == 2
    h.tick()  # 5 s after the first reading
    node = job_service.get(h.ctx, job.id).placements[0].node
    other = "node-2" if node == "node-1" else "node-1"
    assert sorted(h.executor.sampled[2:]) == sorted([(node, frozenset({0, 1})), (other, frozenset())])

    latest = h.latest()
    assert len(latest) == 4 and all(s.time == h.clock.now() and s.simulated for s in latest.values())
    assert all((latest[(node, i)].utilization_pct or 0) >= 60 for i in (0, 1))
    assert all(latest[(other, i)].utilization_pct == 0 for i in (0, 1))
    with db.tx() as s:
        _, points = telemetry_repo.history(s, node, 0, h.clock.now() - timedelta(seconds=10), h.clock.now())
    assert [p.utilization_pct == 0 for p in points] == [True, False]  # idle before the job, busy since

    job_service.cancel(h.ctx, job.id, USER)
    h.executor.exit(job.id, -15)
    for _ in range(5):
        h.tick()
    assert h.executor.sampled[-2:] == [("node-1", frozenset()), ("node-2", frozenset())]


class OneNodeLeft(FakeExecutor):
    def nodes(self) -> list[Node]:
        return super().nodes()[:1]  # node-2 is no longer served: the first node sync marks it down


def test_a_node_that_is_down_is_not_read(db: Database) -> None:
    h = Harness(db, OneNodeLeft)
    h.tick()
    assert h.executor.sampled == [("node-1", frozenset())]
    assert {node for node, _ in h.latest()} == {"node-1"}


class Failing(FakeExecutor):
    """node-1's runtime does not answer until ``heal``; node-2 reports a GPU of another node."""

    broken = True

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        samples = super().telemetry(node, busy)
        if node == "node-1" and self.broken:
            raise TimeoutError("node node-1 did not answer")
        if node == "node-2":
            samples.append(GpuSample("node-9", 0, "GPU-x", samples[0].time, 0, 1, True))
        return samples


def test_a_node_that_cannot_be_read_is_logged_once_and_the_others_are_still_written(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(db, Failing)
    with caplog.at_level(logging.INFO, logger="gpupool.controller"):
        for _ in range(11):
            h.tick()  # reads at 1, 6 and 11 s
        assert {node for node, _ in h.latest()} == {"node-2"}  # and nothing misfiled under node-9
        assert caplog.text.count("cannot read the GPUs of node node-1: node node-1 did not answer") == 1
        h.executor.broken = False
        h.tick(5)
        assert "reading the GPUs of node node-1 works again" in caplog.text
    assert {node for node, _ in h.latest()} == {"node-1", "node-2"}


def test_a_failing_write_is_logged_and_the_loop_goes_on(
    db: Database, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(db)

    def broken(*_args: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(telemetry_repo, "write_samples", broken)
    job = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=1), USER)
    h.tick()
    assert "writing GPU telemetry failed" in caplog.text
    assert job_service.get(h.ctx, job.id).state is not JobState.PENDING  # the cycle scheduled all the same


def test_each_running_worker_s_cgroup_reading_is_kept_with_its_cpu_use_between_readings(db: Database) -> None:
    """Memory now and at its peak from the first reading; CPU from the second (the CPU time used
    between two readings over the time between them); nothing once the worker ended."""
    h = Harness(db)
    h.tick()
    job = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=1, workers=2), USER)
    h.tick()  # it starts
    assert job_service.get(h.ctx, job.id).usage == ()  # not read yet
    h.tick(5)  # a reading: memory, no CPU figure yet
    first = job_service.get(h.ctx, job.id).usage
    assert [(u.worker, u.memory_mib, u.memory_peak_mib, u.cpu_pct) for u in first] == [
        (0, 256, 512, None),
        (1, 256, 512, None),
    ]
    h.tick(5)  # the next: the fake keeps one core busy
    assert [u.cpu_pct for u in job_service.get(h.ctx, job.id).usage] == [100.0, 100.0]
    assert all(u.at == h.clock.now() for u in job_service.get(h.ctx, job.id).usage)
    h.executor.exit(job.id, 0)
    h.tick()
    done = job_service.get(h.ctx, job.id)
    assert done.state is JobState.SUCCEEDED and done.usage == ()

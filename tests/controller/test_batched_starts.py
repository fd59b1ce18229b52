"""A cycle's starts share their commits (``Applier.start_all``): two for the whole cycle, not
two per job; and the jobs a tick settles share one (``Monitor.settle``). Each commit waits for
the disk on the controller's one thread. The guards stay per job: a start gone stale is dropped
alone, and a batch that cannot be recorded as a whole is recorded job by job, its handles never
lost."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, event
from sqlalchemy.orm import Session

from gpupool.clock import FakeClock
from gpupool.controller import applier as applier_module
from gpupool.controller import power as power_module
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.errors import Stale
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.scheduler import SchedulerConfig, schedule
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import READ_ONLY, Database
from gpupool.store.snapshot import load_snapshot
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import USER, FakeExecutor


def four_decided(db: Database) -> tuple[Controller, HeadContext, list[int], FakeExecutor]:
    """Four pending 1-GPU jobs on a 4-GPU node, the controller (no thread running), its executor."""
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, 4))
    controller = Controller(db, executor, clock, SchedulerConfig(), ControllerSettings())
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    ctx = HeadContext(db, clock, executor, controller.wake)
    ids = [job_service.submit(ctx, JobSpec.create(command=["true"], gpus=1), USER).id for _ in range(4)]
    return controller, ctx, ids, executor


@contextlib.contextmanager
def counted_commits(db: Database) -> Iterator[list[int]]:
    """The commits of transactions that may write, made inside the block."""
    commits: list[int] = []

    def count(conn: Connection) -> None:
        if not conn.get_execution_options().get(READ_ONLY):  # reads commit nothing
            commits.append(1)

    event.listen(db.engine, "commit", count)
    try:
        yield commits
    finally:
        event.remove(db.engine, "commit", count)


def start_cycle(db: Database, controller: Controller, ctx: HeadContext) -> dict[int, int]:
    with db.read() as s:
        snapshot = load_snapshot(s, ctx.clock.now())
    result = schedule(snapshot, SchedulerConfig())
    return controller._applier.start_all(result.starts, {j.id: j.spec for j in snapshot.pending})


def test_a_cycle_of_four_starts_commits_twice(db: Database) -> None:
    controller, ctx, ids, _ = four_decided(db)
    with counted_commits(db) as commits:
        started = start_cycle(db, controller, ctx)
    assert started == dict.fromkeys(ids, 1)
    assert len(commits) == 2
    assert {job_service.get(ctx, i).state for i in ids} == {JobState.RUNNING}


def test_a_batch_that_cannot_be_recorded_whole_is_recorded_job_by_job(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller, ctx, ids, _ = four_decided(db)
    real = applier_module.move_job
    refused: list[int] = []

    def refuse_once(*args: object, **kwargs: object) -> None:
        if not refused:  # the first job's running write: as if it moved meanwhile
            refused.append(1)
            raise Stale("moved meanwhile")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(applier_module, "move_job", refuse_once)
    started = start_cycle(db, controller, ctx)

    assert started == dict.fromkeys(ids, 1)
    assert refused == [1]
    assert {job_service.get(ctx, i).state for i in ids} == {JobState.RUNNING}
    with db.read() as s:
        handles = [w.handle for w in worker_repo.live_workers(s)]
    assert len(handles) == 4 and None not in handles


def test_four_jobs_that_ended_together_are_settled_in_one_commit(db: Database) -> None:
    controller, ctx, ids, executor = four_decided(db)
    start_cycle(db, controller, ctx)
    for job_id in ids:
        executor.exit(job_id, 0)
    monitor = controller._parts.monitor
    assert monitor.reap() == set(ids)
    with counted_commits(db) as commits:
        monitor.settle(set(ids))
    assert len(commits) == 1
    assert {job_service.get(ctx, i).state for i in ids} == {JobState.SUCCEEDED}


def test_a_cycle_reads_a_projects_gpu_power_default_once(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    controller, ctx, ids, _ = four_decided(db)
    real = power_module.project_repo.gpu_power_default
    reads: list[str] = []

    def counted(session: Session, project: str) -> str | None:
        reads.append(project)
        return real(session, project)

    monkeypatch.setattr(power_module.project_repo, "gpu_power_default", counted)
    assert start_cycle(db, controller, ctx) == dict.fromkeys(ids, 1)
    assert reads == ["default"]

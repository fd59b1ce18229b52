"""Draining nodes and taking GPUs out of service, in the store: the admin's wish survives the node
going down and coming back, and the probe's health never overwrites the admin's mark."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, text

from gpupool.domain.errors import NotFound
from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import NodeState
from gpupool.scheduler import CycleMemory, SchedulerConfig, schedule
from gpupool.store import drain, nodes, workers
from gpupool.store.db import Database
from gpupool.store.jobs import insert_job, request_cancel
from gpupool.store.orm import EventRow
from gpupool.store.snapshot import load_snapshot
from tests.support.store import make_node, register, states, upgrade_to


def node_events(db: Database, name: str) -> list[tuple[str, str]]:
    with db.tx() as session:
        rows = session.scalars(select(EventRow).where(EventRow.node == name, EventRow.job_id.is_(None)))
        return [(r.kind, r.message) for r in rows]


def start(db: Database, now: datetime, node: str, gpus: tuple[int, ...] = (0,)) -> int:
    """A job whose one worker holds ``gpus`` on ``node``; returns the worker's id."""
    with db.tx() as session:
        job = insert_job(session, JobSpec.create(command=["x"], gpus=len(gpus)), "alice", now)
        ticket = workers.begin_start(session, job.id, (Placement(worker=0, node=node, gpus=gpus),), now)
    return ticket.workers[0][0]


def end(db: Database, worker_id: int, now: datetime) -> None:
    with db.tx() as session:
        workers.record_exit(session, worker_id, 0, lost=False, now=now)


def settle(db: Database, now: datetime) -> list[str]:
    with db.tx() as session:
        return drain.settle_drains(session, now)


def drain_node(db: Database, name: str, now: datetime, reason: str | None = None) -> None:
    with db.tx() as session:
        drain.drain_node(session, name, now, "root", reason)


def undrain_node(db: Database, name: str, now: datetime) -> None:
    with db.tx() as session:
        drain.undrain_node(session, name, now, "root")


def mark_gpu(db: Database, name: str, index: int, disabled: bool, now: datetime) -> None:
    with db.tx() as session:
        drain.set_gpu_disabled(session, name, index, disabled, now, "root", "ECC errors" if disabled else None)


def placed(db: Database, now: datetime, spec: JobSpec, memory: CycleMemory | None = None) -> set[tuple[str, int]]:
    """Where one cycle would start a job of ``spec``: its (node, GPU) pairs, empty if it would
    wait. The job is cancelled afterwards, so every question is asked of the same cluster."""
    with db.tx() as session:
        job_id = insert_job(session, spec, "alice", now).id
        snapshot = load_snapshot(session, now)
    result = schedule(snapshot, SchedulerConfig(), memory=memory)
    with db.tx() as session:
        request_cancel(session, job_id, now, "test")
    return {(p.node, g) for s in result.starts if s.job_id == job_id for p in s.placements for g in p.gpus}


def test_a_draining_node_keeps_its_jobs_and_becomes_drained_when_the_last_worker_ends(
    db: Database, now: datetime
) -> None:
    register(db, now, make_node("a"), make_node("b"))
    first, second = start(db, now, "a", (0,)), start(db, now, "a", (1,))
    drain_node(db, "a", now, reason="PSU swap")
    assert states(db)["a"] is NodeState.DRAINING
    assert settle(db, now) == []
    end(db, first, now)
    assert settle(db, now) == [] and states(db)["a"] is NodeState.DRAINING
    end(db, second, now + timedelta(seconds=1))
    assert settle(db, now + timedelta(seconds=1)) == ["a"]
    assert states(db) == {"a": NodeState.DRAINED, "b": NodeState.UP}
    kinds = [k for k, _ in node_events(db, "a")]
    assert kinds == ["node_up", "node_draining", "node_drained"]
    assert "drain requested by root (PSU swap)" in node_events(db, "a")[1][1]
    assert settle(db, now + timedelta(seconds=2)) == []  # drained stays drained, no new event


def test_an_idle_node_is_drained_at_once_and_a_second_drain_changes_nothing(db: Database, now: datetime) -> None:
    register(db, now, make_node("a"))
    drain_node(db, "a", now)
    drain_node(db, "a", now)
    assert states(db)["a"] is NodeState.DRAINED
    assert [k for k, _ in node_events(db, "a")] == ["node_up", "node_draining", "node_drained"]


def test_nothing_new_lands_on_a_draining_or_drained_node(db: Database, now: datetime) -> None:
    register(db, now, make_node("a", 4), make_node("b", 4), make_node("c", 4))
    start(db, now, "a", (0,))
    drain_node(db, "a", now)  # draining: a job still runs there
    drain_node(db, "b", now)  # drained: idle
    with db.tx() as session:
        snapshot = load_snapshot(session, now)
    assert [n.schedulable for n in snapshot.nodes] == [False, False, True]
    assert placed(db, now, JobSpec.create(command=["y"], gpus=4, workers=2)) == set()  # would need a or b
    assert {n for n, _ in placed(db, now, JobSpec.create(command=["y"], gpus=4))} == {"c"}
    assert {n for n, _ in placed(db, now, JobSpec.create(command=["y"], gpus=1, workers=4))} == {"c"}


def test_undrain_opens_the_node_again(db: Database, now: datetime) -> None:
    register(db, now, make_node("a"))
    worker = start(db, now, "a")
    drain_node(db, "a", now)
    undrain_node(db, "a", now)  # from draining
    assert states(db)["a"] is NodeState.UP
    drain_node(db, "a", now)
    end(db, worker, now)
    settle(db, now)
    undrain_node(db, "a", now)  # from drained
    assert states(db)["a"] is NodeState.UP
    undrain_node(db, "a", now)  # up: nothing to do
    kinds = [k for k, _ in node_events(db, "a")]
    assert kinds == ["node_up", "node_draining", "node_up", "node_draining", "node_drained", "node_up"]
    assert placed(db, now, JobSpec.create(command=["y"], gpus=2)) == {("a", 0), ("a", 1)}


def test_a_drained_node_that_goes_down_comes_back_drained(db: Database, now: datetime) -> None:
    register(db, now, make_node("a"), make_node("b"))
    drain_node(db, "a", now)
    register(db, now + timedelta(minutes=1), make_node("b"))
    assert states(db)["a"] is NodeState.DOWN
    register(db, now + timedelta(minutes=2), make_node("a"), make_node("b"))
    assert states(db)["a"] is NodeState.DRAINED
    kinds, messages = zip(*node_events(db, "a"), strict=True)
    assert kinds[-2:] == ("node_down", "node_drained")
    assert "is back, drained as an admin asked" in messages[-1]


def test_a_draining_node_that_comes_back_with_a_live_worker_is_still_draining(db: Database, now: datetime) -> None:
    register(db, now, make_node("a"))
    worker = start(db, now, "a")
    drain_node(db, "a", now)
    register(db, now, *[])
    register(db, now, make_node("a"))
    assert states(db)["a"] is NodeState.DRAINING
    end(db, worker, now)
    settle(db, now)
    assert states(db)["a"] is NodeState.DRAINED


def test_draining_a_down_node_records_the_wish_and_undrain_clears_it(db: Database, now: datetime) -> None:
    register(db, now, make_node("a"), make_node("b"))
    register(db, now, make_node("b"))
    drain_node(db, "a", now, reason="RMA")
    drain_node(db, "a", now)  # the wish is recorded once
    assert states(db)["a"] is NodeState.DOWN
    with db.tx() as session:
        (record,) = [r for r in nodes.node_records(session) if r.node.name == "a"]
    assert record.drain_requested and record.gpus_free == 0
    assert node_events(db, "a")[-1] == (
        "drain_requested",
        "drain requested by root (RMA) while node a is down; it comes back drained",
    )
    undrain_node(db, "a", now)
    assert node_events(db, "a")[-1][0] == "undrain_requested"
    register(db, now, make_node("a"), make_node("b"))
    assert states(db)["a"] is NodeState.UP


def test_unknown_node_or_gpu_is_not_found(db: Database, now: datetime) -> None:
    register(db, now, make_node("a", 2))
    with pytest.raises(NotFound) as node_info:
        drain_node(db, "nope", now)
    assert node_info.value.code == "node_not_found" and "no node nope" in node_info.value.message
    with pytest.raises(NotFound) as gpu_info:
        mark_gpu(db, "a", 7, True, now)
    assert gpu_info.value.code == "gpu_not_found"
    assert gpu_info.value.message == "node a has no GPU 7: its GPUs are 0, 1"


def test_a_disabled_gpu_keeps_its_job_takes_no_new_one_and_survives_the_probe(db: Database, now: datetime) -> None:
    register(db, now, make_node("a", 2))
    worker = start(db, now, "a", (0,))
    mark_gpu(db, "a", 0, True, now)
    register(db, now, make_node("a", 2))  # the probe reports every GPU healthy again
    with db.tx() as session:
        (record,) = nodes.node_records(session)
    assert [g.healthy for g in record.node.gpus] == [False, True]
    assert record.disabled_gpus == {0} and record.used_gpus == {0: [1]} and record.gpus_free == 1
    assert record.node.state is NodeState.UP
    memory = CycleMemory()  # the controller's index, carried from cycle to cycle
    assert placed(db, now, JobSpec.create(command=["y"], gpus=2), memory) == set()
    end(db, worker, now)  # the job on the disabled GPU ends: the GPU is still not handed out
    assert placed(db, now, JobSpec.create(command=["y"], gpus=2), memory) == set()
    assert placed(db, now, JobSpec.create(command=["y"], gpus=1), memory) == {("a", 1)}
    mark_gpu(db, "a", 0, False, now)
    assert placed(db, now, JobSpec.create(command=["y"], gpus=2), memory) == {("a", 0), ("a", 1)}
    assert [k for k, _ in node_events(db, "a")] == ["node_up", "gpu_disabled", "gpu_enabled"]
    assert "GPU 0 marked unhealthy by root (ECC errors)" in node_events(db, "a")[1][1]


def test_no_share_lands_beside_a_running_share_on_a_disabled_gpu(db: Database, now: datetime) -> None:
    register(db, now, make_node("a", 1))
    with db.tx() as session:
        job = insert_job(session, JobSpec.create(command=["x"], gpus=0.25), "alice", now)
        workers.begin_start(session, job.id, (Placement(worker=0, node="a", gpus=(0,), gpu_share=0.25),), now)
    assert placed(db, now, JobSpec.create(command=["y"], gpus=0.25)) == {("a", 0)}
    mark_gpu(db, "a", 0, True, now)
    assert placed(db, now, JobSpec.create(command=["y"], gpus=0.25)) == set()


def test_clearing_the_mark_of_a_gpu_the_probe_calls_unhealthy_leaves_it_out(db: Database, now: datetime) -> None:
    node = make_node("a", 2)
    register(db, now, replace(node, gpus=(node.gpus[0], replace(node.gpus[1], healthy=False))))
    mark_gpu(db, "a", 1, True, now)
    mark_gpu(db, "a", 1, False, now)
    with db.tx() as session:
        (loaded,) = nodes.load_nodes(session)
    assert [g.healthy for g in loaded.gpus] == [True, False]
    assert "its probe still reports it unhealthy" in node_events(db, "a")[-1][1]


def test_migration_0003_keeps_existing_nodes_and_gpus_in_service(db_url: str, now: datetime) -> None:
    """Upgrade a database that has nodes and GPUs from 0002: nothing is drained or disabled."""
    database = Database(db_url)
    try:
        with database.engine.begin() as connection:
            upgrade_to(database, connection, "0002")
            connection.execute(
                text(
                    "INSERT INTO nodes (name, state, address, cpus, memory_mib, labels, updated_at) "
                    "VALUES ('old', 'up', 'x', 8, 1024, '{}', :now)"
                ),
                {"now": now.strftime("%Y-%m-%d %H:%M:%S.%f")},
            )
            connection.execute(
                text(
                    'INSERT INTO gpus (node, "index", uuid, model, memory_mib, simulated, healthy) '
                    "VALUES ('old', 0, 'GPU-0', 'A100', 40960, true, true)"
                )
            )
        database.migrate()
        with database.tx() as session:
            (record,) = nodes.node_records(session)
        assert (record.node.state, record.drain_requested, record.disabled_gpus) == (NodeState.UP, False, frozenset())
        assert [g.healthy for g in record.node.gpus] == [True]
        drain_node(database, "old", now)
        mark_gpu(database, "old", 0, True, now)
        with database.tx() as session:
            (record,) = nodes.node_records(session)
        assert (record.node.state, record.drain_requested, record.disabled_gpus) == (NodeState.DRAINED, True, {0})
    finally:
        database.close()

"""Node rows follow what the executor serves: new nodes join, missing ones go down and come back."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import NodeState
from gpupool.domain.records import NodeRecord
from gpupool.store import nodes, workers
from gpupool.store.db import Database
from gpupool.store.jobs import insert_job
from gpupool.store.orm import EventRow
from tests.support.store import make_node, register, states


def node_events(db: Database) -> list[tuple[str, str | None]]:
    with db.tx() as session:
        rows = session.scalars(select(EventRow).where(EventRow.job_id.is_(None)).order_by(EventRow.id))
        return [(r.kind, r.node) for r in rows]


def test_registered_nodes_round_trip(db: Database, now: datetime) -> None:
    a, b = make_node("a", 2), make_node("bb", 0, cpus=8)
    register(db, now, b, a)
    with db.tx() as session:
        loaded = nodes.load_nodes(session)
    assert loaded == [a, b]  # ordered by name, every field back, GPUs by index
    assert node_events(db) == [("node_up", "bb"), ("node_up", "a")]


def test_missing_nodes_go_down_and_come_back_up(db: Database, now: datetime) -> None:
    a, b = make_node("a"), make_node("b")
    register(db, now, a, b)
    assert states(db) == {"a": NodeState.UP, "b": NodeState.UP}

    later = now + timedelta(minutes=1)
    register(db, later, a)
    assert states(db) == {"a": NodeState.UP, "b": NodeState.DOWN}
    assert node_events(db)[-1] == ("node_down", "b")

    # Still missing: no second event.
    register(db, later + timedelta(minutes=1), a)
    assert [e for e in node_events(db) if e == ("node_down", "b")] == [("node_down", "b")]

    register(db, later + timedelta(minutes=2), a, b)
    assert states(db) == {"a": NodeState.UP, "b": NodeState.UP}
    assert node_events(db) == [
        ("node_up", "a"),
        ("node_up", "b"),
        ("node_down", "b"),
        ("node_up", "b"),
    ]
    with db.tx() as session:
        messages = [r.message for r in session.scalars(select(EventRow).order_by(EventRow.id))]
    assert "back" in messages[-1]


def test_serving_nothing_marks_every_node_down(db: Database, now: datetime) -> None:
    register(db, now, make_node("a"), make_node("b"))
    register(db, now, *[])
    assert states(db) == {"a": NodeState.DOWN, "b": NodeState.DOWN}


def test_gpus_follow_the_probe(db: Database, now: datetime) -> None:
    register(db, now, make_node("a", 4))
    shrunk = make_node("a", 2, model="H100")
    register(db, now, shrunk)
    with db.tx() as session:
        (loaded,) = nodes.load_nodes(session)
    assert loaded.gpus == shrunk.gpus
    assert [g.model for g in loaded.gpus] == ["H100", "H100"]


def test_node_records_count_gpus_held_by_live_workers(db: Database, now: datetime) -> None:
    register(db, now, make_node("a", 4), make_node("b", 2))
    with db.tx() as session:
        job = insert_job(session, JobSpec.create(command=["x"], gpus=2), "alice", now)
        workers.begin_start(session, job.id, (Placement(worker=0, node="a", gpus=(1, 3)),), now)
    with db.tx() as session:
        records = {r.node.name: r for r in nodes.node_records(session)}
    assert records["a"] == NodeRecord(
        node=make_node("a", 4), gpus_free=2, simulated=True, used_gpus={1: [job.id], 3: [job.id]}, jobs=(job.id,)
    )
    assert (records["b"].gpus_free, records["b"].used_gpus) == (2, {})
    with db.tx() as session:
        (worker,) = workers.live_workers(session)
        workers.record_exit(session, worker.id, 0, lost=False, now=now)
    with db.tx() as session:
        records = {r.node.name: r for r in nodes.node_records(session)}
    assert (records["a"].gpus_free, records["a"].used_gpus) == (4, {})

"""Store helpers: walk a job through states, bring a database to an old revision, compare a
database's schema with the ORM's, register nodes and submit a job straight into the store."""

from __future__ import annotations

from datetime import datetime

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, MetaData

from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.store import jobs, nodes
from gpupool.store.db import Database, alembic_config
from gpupool.store.transitions import transition_job


def move(db: Database, job_id: int, now: datetime, *states: JobState) -> None:
    """Walk a job through ``states`` with the one transition function, as the controller would."""
    with db.tx() as session:
        row = jobs.job_row(session, job_id)
        for state in states:
            transition_job(session, row, state, now, f"test: to {state.value}")


def upgrade_to(database: Database, connection: Connection, revision: str) -> None:
    """Bring an empty database to an old ``revision`` on ``connection``, for a migration test to
    fill it with rows as that revision had them before it migrates to the newest."""
    cfg = alembic_config(database.engine)
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


def schema_diff(db: Database, metadata: MetaData) -> list[object]:
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        return list(compare_metadata(context, metadata))


def make_node(name: str, gpus: int = 2, *, model: str = "A100", cpus: int = 32) -> Node:
    return Node(
        name=name,
        state=NodeState.UP,
        address=f"10.0.0.{len(name)}:7000",
        gpus=tuple(
            GpuInfo(index=i, uuid=f"GPU-{name}-{i}", model=model, memory_mib=81_920, simulated=True)
            for i in range(gpus)
        ),
        cpus=cpus,
        memory_mib=256_000,
        labels={"rack": "r1", "zone": name},
    )


def states(db: Database) -> dict[str, NodeState]:
    with db.tx() as session:
        return {n.name: n.state for n in nodes.load_nodes(session)}


def register(db: Database, now: datetime, *served: Node) -> None:
    with db.tx() as session:
        nodes.register_nodes(session, served, now)


def node(name: str) -> Node:
    gpus = tuple(GpuInfo(index=i, uuid=f"{name}-{i}", model="L4", memory_mib=24_000, simulated=True) for i in range(4))
    return Node(name=name, state=NodeState.UP, address=name, gpus=gpus, cpus=16, memory_mib=64_000)


def submit(db: Database, now: datetime, **spec: object) -> int:
    with db.tx() as session:
        nodes.register_nodes(session, [node("n1"), node("n2")], now)
        return jobs.insert_job(session, JobSpec.create(command=["train"], **spec), "alice", now).id  # type: ignore[arg-type]

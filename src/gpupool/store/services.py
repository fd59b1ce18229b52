"""Service rows, and the replica jobs of services as the reconciler and the API read them.

A replica's port and readiness live on its current attempt's worker row: a replica requeued after
its node died starts again on a new port, not ready, with no flag left over from before.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpupool.domain.errors import NotFound
from gpupool.domain.jobs import ACTIVE_JOB_STATES, JobSpec
from gpupool.domain.services import Replica, ServiceRecord, ServiceSpec
from gpupool.store.convert import spec_of
from gpupool.store.orm import JobRow, NodeRow, ServiceRow, WorkerRow


def find_service(session: Session, name: str, *, lock: bool = False) -> ServiceRow | None:
    return session.get(ServiceRow, name, with_for_update=lock)


def get_service(session: Session, name: str) -> ServiceRecord:
    row = find_service(session, name)
    if row is None:
        raise NotFound(f"no service {name}: list services with gpupool services", code="service_not_found")
    return record(row)


def list_services(session: Session) -> list[ServiceRecord]:
    return [record(r) for r in session.scalars(select(ServiceRow).order_by(ServiceRow.name))]


def insert_service(
    session: Session, spec: ServiceSpec, owner: str, run_as: str | None, desired: int, now: datetime
) -> ServiceRecord:
    row = ServiceRow(
        name=spec.name,
        project=spec.project,
        owner=owner,
        run_as=run_as,
        spec=spec.to_dict(),
        desired=desired,
        autoscale={},
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    return record(row)


def update_service(session: Session, row: ServiceRow, spec: ServiceSpec, desired: int, now: datetime) -> None:
    row.spec, row.desired, row.updated_at, row.autoscale = spec.to_dict(), desired, now, {}


def set_desired(session: Session, name: str, desired: int, autoscale: Mapping[str, Any] | None, now: datetime) -> None:
    values: dict[str, Any] = {"desired": desired}
    if autoscale is not None:
        values["autoscale"] = dict(autoscale)
    session.execute(update(ServiceRow).where(ServiceRow.name == name).values(**values))


def delete_service(session: Session, name: str) -> None:
    row = find_service(session, name, lock=True)
    if row is not None:
        session.delete(row)


def record(row: ServiceRow) -> ServiceRecord:
    return ServiceRecord(
        spec=ServiceSpec.from_dict(row.spec),
        owner=row.owner,
        run_as=row.run_as,
        desired=row.desired,
        created_at=row.created_at,
        updated_at=row.updated_at,
        autoscale=dict(row.autoscale or {}),
    )


def replicas(session: Session, templates: Mapping[str, JobSpec]) -> dict[str, list[Replica]]:
    """The unfinished replica jobs of the services in ``templates`` (name -> current replica spec),
    each with its current attempt's node, address, port and readiness."""
    if not templates:
        return {}
    rows = list(
        session.scalars(
            select(JobRow)
            .where(JobRow.service.in_(list(templates)), JobRow.state.in_(ACTIVE_JOB_STATES))
            .order_by(JobRow.id)
        )
    )
    workers: dict[int, WorkerRow] = {}
    if rows:
        # The current attempt's worker 0 only: a replica restarted in place keeps every attempt's row.
        query = (
            select(WorkerRow)
            .join(JobRow, JobRow.id == WorkerRow.job_id)
            .where(WorkerRow.job_id.in_([r.id for r in rows]), WorkerRow.worker == 0)
            .where(WorkerRow.attempt == JobRow.starts)
        )
        for found in session.scalars(query):
            workers[found.job_id] = found
    addresses = {name: address for name, address in session.execute(select(NodeRow.name, NodeRow.address))}
    out: dict[str, list[Replica]] = {name: [] for name in templates}
    for row in rows:
        assert row.service is not None
        w = workers.get(row.id)
        live = w is not None and w.status in ("launching", "running")
        out[row.service].append(
            Replica(
                job_id=row.id,
                state=row.state,
                current=spec_of(row) == templates[row.service],
                stopping=row.stop_reason is not None,
                node=w.node if w is not None and live else None,
                host=addresses.get(w.node) if w is not None and live else None,
                port=w.port if w is not None and live else None,
                ready=bool(live and w is not None and w.ready_at is not None and row.state == "running"),
                started_at=w.started_at if w is not None else None,
                worker_id=w.id if w is not None else None,
                restarts=row.restarts,
                # a requeued job keeps no exit of its own: its last attempt's worker has it
                exit_code=w.exit_code if w is not None and w.exit_code is not None else row.exit_code,
                exit_reason=w.exit_reason if w is not None and w.exit_code is not None else row.exit_reason,
                backing_off_until=row.not_before if row.state == "pending" and row.reason_code == "backoff" else None,
                last_node=w.node if w is not None else None,
                ready_at=w.ready_at if w is not None else None,
            )
        )
    return out


def set_ready(session: Session, worker_id: int, ready_at: datetime | None) -> None:
    session.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(ready_at=ready_at))


def published_ports(session: Session) -> list[tuple[int, str, str, int]]:
    """Running jobs that publish a port (``JobSpec.expose``): job id, project, and worker 0's node
    address and that port, of the current attempt (a requeued job is published again where it
    runs now, once it runs)."""
    rows = session.execute(
        select(JobRow.id, JobRow.project, JobRow.expose, NodeRow.address)
        .join(WorkerRow, (WorkerRow.job_id == JobRow.id) & (WorkerRow.attempt == JobRow.starts))
        .join(NodeRow, NodeRow.name == WorkerRow.node)
        .where(JobRow.expose.is_not(None), JobRow.state == "running", WorkerRow.worker == 0)
        .where(WorkerRow.status.in_(("launching", "running")))
        .order_by(JobRow.id)
    )
    return [(job_id, project, address, port) for job_id, project, port, address in rows if address and port]


def served_ports(session: Session) -> list[tuple[str, str, int, int]]:
    """The ports live workers serve and their node walled at launch (a replica's, worker 0's
    published one): node, node address, port, job id. A port the node did not wall (something
    listened on it already) is left out, so no node walls it either."""
    rows = session.execute(
        select(WorkerRow.node, NodeRow.address, WorkerRow.handle, WorkerRow.job_id)
        .join(JobRow, JobRow.id == WorkerRow.job_id)
        .join(NodeRow, NodeRow.name == WorkerRow.node)
        .where(WorkerRow.status.in_(("launching", "running")))
        .where(WorkerRow.port.is_not(None) | ((WorkerRow.worker == 0) & JobRow.expose.is_not(None)))
        .order_by(WorkerRow.id)
    )
    return [
        (node, address, int(handle["port"]), job_id)
        for node, address, handle, job_id in rows
        if address and isinstance(handle, dict) and isinstance(handle.get("port"), int)
    ]

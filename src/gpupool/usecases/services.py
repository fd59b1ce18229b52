"""Service use cases: serve (create or update), list, show, scale, delete; and what the gateway
reads (routes) and writes (load reports).

``serve NAME`` creates the service, or updates it where the caller may act on it (its owner, a
manager of its project, an admin): an update that changes the replica's job rolls the replicas,
one that changes only counts or gateway settings does not. A name taken in another project is a
409 ``service_exists``; a service of the same project that is someone else's is a 403.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpupool.domain.errors import Conflict, NotFound
from gpupool.domain.permissions import may_submit_to
from gpupool.domain.services import (
    Replica,
    ServiceRecord,
    ServiceSpec,
    ServiceState,
    check_replicas,
    check_service_name,
    service_state,
)
from gpupool.store import jobs as job_repo
from gpupool.store import members as member_repo
from gpupool.store import nodes as node_repo
from gpupool.store import services as service_repo
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal
from gpupool.usecases.access import require_owner, require_submit
from gpupool.usecases.context import HeadContext
from gpupool.usecases.load import ReplicaLoad, ServiceLoad
from gpupool.usecases.submission import check_satisfiable


@dataclass(frozen=True, slots=True)
class ServiceView:
    record: ServiceRecord
    replicas: tuple[Replica, ...]
    full: bool  # the caller may see its command and environment
    load: ServiceLoad | None = None  # the gateway's recent reports (listing and show only)
    crash_log: tuple[str, ...] = ()  # show only, to those who may read logs: the end of the crashing replica's
    # Where the head runs a gateway: when it last reported, and the replicas it routed to then. A
    # replica reads ready only once the gateway routes to it (else a caller would get 503 at first).
    routed: tuple[datetime, frozenset[str]] | None = None
    gateway: bool = False
    # The caller may call it (public, or a member of its project): only then are its replicas'
    # host:port shown. They answer only the gateway anyway (``node/netwall.py``).
    reachable: bool = False

    def serving(self, r: Replica) -> bool:
        """Ready, not being stopped, and (with a gateway) routed to by it since it became ready."""
        if not r.ready or r.stopping:
            return False
        if not self.gateway:
            return True
        if self.routed is None or r.ready_at is None:
            return False
        at, names = self.routed
        return str(r.job_id) in names and _aware(at) >= _aware(r.ready_at)

    @property
    def ready(self) -> int:
        return sum(1 for r in self.replicas if self.serving(r))

    @property
    def starting(self) -> int:
        return sum(1 for r in self.replicas if r.starting)

    @property
    def state(self) -> ServiceState:
        return service_state(self.record.desired, self.ready, self.crashing is not None)

    @property
    def crashing(self) -> Replica | None:
        """The replica that failed most often and waits to be started again, if any."""
        waiting = [r for r in self.replicas if r.crashing]
        return max(waiting, key=lambda r: r.restarts) if waiting else None

    @property
    def endpoints(self) -> list[Replica]:
        """Ready replicas that are not being stopped: where the gateway may send requests."""
        return [r for r in self.replicas if r.ready and not r.stopping and r.host and r.port]


def initial_desired(spec: ServiceSpec) -> int:
    return spec.floor if spec.autoscaled else spec.min_replicas


def serve(ctx: HeadContext, spec: ServiceSpec, who: Principal) -> tuple[ServiceView, bool]:
    """Create or update; True when it was created."""
    now = ctx.clock.now()
    with ctx.db.tx() as s:
        require_submit(s, who, spec.project)
        if spec.max_replicas:
            check_satisfiable(spec.replica_spec(), node_repo.load_nodes(s))
        row = service_repo.find_service(s, spec.name, lock=True)
        if row is None:
            run_as = ctx.accounts.run_as(who.user, who.unix_user)
            service_repo.insert_service(s, spec, who.user, run_as, initial_desired(spec), now)
            created = True
        else:
            if row.project != spec.project:
                raise Conflict(
                    f"service name {spec.name} is taken: it belongs to project {row.project} (owner {row.owner});"
                    " choose another name",
                    code="service_exists",
                )
            _require_act(s, who, service_repo.record(row), "update")
            old = service_repo.record(row)
            desired = initial_desired(spec)
            if spec.autoscaled:  # keep what the autoscaler chose, within the new bounds
                desired = max(spec.floor, min(spec.max_replicas, old.desired))
            service_repo.update_service(s, row, spec, desired, now)
            created = False
        view = _view(s, who, service_repo.get_service(s, spec.name))
    ctx.wake_services()
    return view, created


def listing(ctx: HeadContext, who: Principal) -> list[ServiceView]:
    with ctx.db.read() as s:
        records = service_repo.list_services(s)
        views = _views(s, who, records)
    return [_with_load(ctx, v) for v in views]


def show(ctx: HeadContext, name: str, who: Principal) -> ServiceView:
    check_service_name(name)
    with ctx.db.read() as s:
        view = _view(s, who, service_repo.get_service(s, name))
    crash = view.crashing
    if crash is not None and view.full and crash.last_node is not None:
        view = dataclasses.replace(view, crash_log=_log_tail(ctx, crash.last_node, crash.job_id))
    return _with_load(ctx, view)


LOG_TAIL_LINES = 10
_LOG_TAIL_BYTES = 1 << 16  # ten lines of a log, however long the log (its attempts append to it)


def _log_tail(ctx: HeadContext, node: str, job_id: int) -> tuple[str, ...]:
    """The last lines of worker 0's log, where its last attempt ran; none if the node is gone."""
    try:
        data = ctx.executor.read_log(node, job_id, 0, -_LOG_TAIL_BYTES)  # from the end
    except Exception:  # a node that does not answer: the state still says crash_loop
        return ()
    lines = data.decode(errors="replace").splitlines()
    return tuple(lines[-LOG_TAIL_LINES:])


def replica_states(ctx: HeadContext) -> list[tuple[str, int, dict[str, int]]]:
    """(service, desired, replicas by state) for ``/metrics``; a replica is ``stopping``, else
    ``ready`` (it answers its health check), else ``starting``."""
    with ctx.db.read() as s:
        records = service_repo.list_services(s)
        found = service_repo.replicas(s, {r.spec.name: r.spec.replica_spec() for r in records})
    out = []
    for record in records:
        states = {"ready": 0, "starting": 0, "stopping": 0}
        for r in found.get(record.spec.name, ()):
            states["stopping" if r.stopping else "ready" if r.ready else "starting"] += 1
        out.append((record.spec.name, record.desired, states))
    return out


def scale(ctx: HeadContext, name: str, replicas: int, who: Principal) -> ServiceView:
    """Pin the count: min = max = ``replicas`` (autoscaling off until the next ``serve``). The
    replica's job is unchanged, so nothing rolls."""
    check_service_name(name)
    check_replicas("replicas", replicas)
    with ctx.db.tx() as s:
        record = service_repo.get_service(s, name)
        row = service_repo.find_service(s, name, lock=True)
        assert row is not None
        _require_act(s, who, record, "scale")
        zero = record.spec.scale_to_zero and not replicas
        spec = dataclasses.replace(record.spec, min_replicas=replicas, max_replicas=replicas, scale_to_zero=zero)
        service_repo.update_service(s, row, spec, replicas, ctx.clock.now())
        view = _view(s, who, service_repo.get_service(s, name))
    ctx.wake_services()
    return view


def delete(ctx: HeadContext, name: str, who: Principal) -> None:
    """The service goes at once; its replicas are cancelled (their processes are stopped by the
    controller as any cancelled job's are)."""
    check_service_name(name)
    now = ctx.clock.now()
    with ctx.db.tx() as s:
        record = service_repo.get_service(s, name)
        _require_act(s, who, record, "delete")
        for replica in service_repo.replicas(s, {name: record.spec.replica_spec()})[name]:
            row = job_repo.job_row(s, replica.job_id, lock=True)
            if replica.stopping and row.stop_reason == "cancel":
                continue
            job_repo.request_cancel(s, replica.job_id, now, f"{who.user} (service {name} deleted)")
        service_repo.delete_service(s, name)
    ctx.wake_services()


@dataclass(frozen=True, slots=True)
class Route:
    record: ServiceRecord
    endpoints: tuple[Replica, ...]


def routes(ctx: HeadContext) -> list[Route]:
    """Every service with its ready replicas: what the gateway routes to."""
    with ctx.db.read() as s:
        records = service_repo.list_services(s)
        found = service_repo.replicas(s, {r.spec.name: r.spec.replica_spec() for r in records})
    views = [ServiceView(r, tuple(found.get(r.spec.name, ())), False) for r in records]
    return [Route(v.record, tuple(v.endpoints)) for v in views]


@dataclass(frozen=True, slots=True)
class JobRoute:
    """A running job's published port (``--expose``): where the gateway sends ``/jobs/<id>/``."""

    job_id: int
    project: str
    host: str
    port: int


def job_routes(ctx: HeadContext) -> list[JobRoute]:
    with ctx.db.read() as s:
        return [JobRoute(*found) for found in service_repo.published_ports(s)]


def record_load(
    ctx: HeadContext, window_s: float, lines: Sequence[ReplicaLoad], latency_bounds: Sequence[float] = ()
) -> int:
    """Keep a gateway report for the autoscaler and the faces; how many lines were kept."""
    return ctx.load.record(ctx.clock.now(), window_s, lines, latency_bounds)


def _require_act(s: Tx, who: Principal, record: ServiceRecord, what: str) -> None:
    act = f"{what} service {record.spec.name}"
    require_owner(s, who, record.owner, record.spec.project, act, "not_your_service")


def _with_load(ctx: HeadContext, view: ServiceView) -> ServiceView:
    name = view.record.spec.name
    return dataclasses.replace(
        view,
        load=ctx.load.figures(name, ctx.clock.now()),
        routed=ctx.load.routed(name),
        gateway=ctx.gateway.port is not None,
    )


def _aware(at: datetime) -> datetime:
    """SQLite gives times back without a zone; every time gpupool stores is UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _view(s: Tx, who: Principal, record: ServiceRecord) -> ServiceView:
    return _views(s, who, [record])[0]


def _views(s: Tx, who: Principal, records: list[ServiceRecord]) -> list[ServiceView]:
    found = service_repo.replicas(s, {r.spec.name: r.spec.replica_spec() for r in records})
    managed = set() if who.is_admin else member_repo.managed_by(s, who.user)
    callers: dict[str, bool] = {}  # project -> whether ``who`` may call its services
    for project in {r.spec.project for r in records if not r.spec.public}:
        with contextlib.suppress(NotFound):
            callers[project] = may_submit_to(who.is_admin, *member_repo.project_access(s, project, who.user))
    return [
        ServiceView(
            r,
            tuple(found.get(r.spec.name, ())),
            who.is_admin or who.user == r.owner or r.spec.project in managed,
            reachable=r.spec.public or callers.get(r.spec.project, False),
        )
        for r in records
    ]

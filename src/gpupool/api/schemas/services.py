"""Service request/response models, and the gateway's contract (routes out, load reports in).
Field names here are a contract scripts and the gateway depend on."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpupool.domain.resources import CPU_MILLI
from gpupool.domain.services import Replica, ServiceSpec
from gpupool.usecases.context import GatewayPlace
from gpupool.usecases.load import LoadFigures, ReplicaLoad, ServiceLoad
from gpupool.usecases.services import JobRoute, Route, ServiceView

MAX_REPORT_LINES = 10_000
MAX_BOUNDS = 64  # latency buckets in a load report
# A job's published port (a notebook: pages, kernels' WebSockets, long polls) is one person's:
# many requests at once, a short queue, and a long wait for an answer's first byte.
JOB_CONCURRENCY, JOB_QUEUE, JOB_TIMEOUT_S = 256, 64, 300.0


class ServeRequest(BaseModel):
    """``ServiceSpec.create``'s keywords; it checks every bound. ``replicas`` alone fixes the count;
    ``min_replicas``/``max_replicas`` let the autoscaler choose within them."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="1 to 63 lower-case letters, digits and '-' (a DNS label)")
    command: list[str] = Field(
        description="argument vector of the server; never run through a shell (empty with an image: its own)"
    )
    project: str | None = None
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpus: float = Field(1.0, description="per replica")
    cpus: float | int | str = Field(0, description="per replica: cores (2, pinned; 0.5, shared) or millicores ('500m')")
    memory: str | int | None = Field(None, description="per replica, e.g. 8G, or MiB as a number")
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = Field(None, description="the replicas' working directory")
    max_concurrency: int = Field(16, description="requests one replica is sent at once (1 to 10000)")
    target_concurrency: int | None = Field(None, description="the autoscaler's aim per replica; default max")
    health_path: str = Field("/healthz", description="GET on each replica; ready once it answers 2xx")
    port_env: str = Field("PORT", description="the variable each replica is told its port in")
    public: bool = Field(False, description="the gateway serves it without a token")
    scale_to_zero: bool = Field(False, description="with min_replicas 0: no replica while there is no traffic")
    queue_limit: int = Field(100, description="requests the gateway queues beyond the replicas' capacity")
    timeout_s: float = Field(60.0, description="the gateway's limit on one request, waiting for a replica included")
    scale_down_delay_s: float = Field(60.0, description="load must ask for fewer replicas this long first")
    ready_timeout_s: float = Field(120.0, description="a replica not ready this long gets an event saying why")
    image: str | None = Field(
        None, description="an OCI image its replicas run in (as a job's image); the command may then be empty"
    )
    gpu_power: str | None = Field(
        None, max_length=16, description="its replicas' GPU power mode, as a job's: max, efficient or 400W"
    )

    def spec(self) -> ServiceSpec:
        return ServiceSpec.create(**self.model_dump())


class ScaleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(description="0 to 64: pins the count (autoscaling off until the next serve)")


class ReplicaCounts(BaseModel):
    desired: int
    ready: int
    starting: int


class LoadOut(BaseModel):
    """Recent load as the gateway reported it: rates over the last ``window_s`` of reports, in
    flight and queued as of the newest; latency from arrival at the gateway to the replica's
    response head (null without latency in the reports, or without requests)."""

    requests_per_s: float
    errors_per_s: float
    in_flight: int
    queued: int
    latency_p50_s: float | None
    latency_p99_s: float | None

    @classmethod
    def of(cls, f: LoadFigures) -> LoadOut:
        return cls(
            requests_per_s=round(f.requests_per_s, 3),
            errors_per_s=round(f.errors_per_s, 3),
            in_flight=f.in_flight,
            queued=f.queued,
            latency_p50_s=None if f.latency_p50_s is None else round(f.latency_p50_s, 6),
            latency_p99_s=None if f.latency_p99_s is None else round(f.latency_p99_s, 6),
        )


class ServiceLoadOut(LoadOut):
    window_s: float = Field(description="the span of the reports the rates are over")
    age_s: float = Field(description="since the newest report; past 15 s in_flight and queued say 0")

    @classmethod
    def of_service(cls, load: ServiceLoad) -> ServiceLoadOut:
        return cls(**LoadOut.of(load.total).model_dump(), window_s=round(load.window_s, 3), age_s=round(load.age_s, 3))


class ReplicaOut(BaseModel):
    job_id: int
    state: str = Field(description="its job's state")
    ready: bool
    current: bool = Field(description="runs the service's current version (false while an update rolls)")
    stopping: bool
    node: str | None
    host: str | None = Field(description="null while it runs nowhere, or for a caller who may not call the service")
    port: int | None
    restarts: int = Field(0, description="how many times it failed and was started again")
    load: LoadOut | None = Field(None, description="null where the gateway has not reported it lately")

    @classmethod
    def of(cls, r: Replica, load: ServiceLoad | None = None, where: bool = True) -> ReplicaOut:
        """``where``: whether the caller may see its host and port (one who may call the service)."""
        figures = None if load is None else load.replicas.get(str(r.job_id))
        return cls(
            load=None if figures is None else LoadOut.of(figures),
            job_id=r.job_id,
            state=r.state,
            ready=r.ready,
            current=r.current,
            stopping=r.stopping,
            node=r.node,
            host=r.host if where else None,
            port=r.port if where else None,
            restarts=r.restarts,
        )


class EndpointOut(BaseModel):
    replica: str = Field(description="the replica's job id")
    host: str
    port: int

    @classmethod
    def of(cls, r: Replica) -> EndpointOut:
        assert r.host is not None and r.port is not None
        return cls(replica=str(r.job_id), host=r.host, port=r.port)


class CrashLoopOut(BaseModel):
    job_id: int = Field(description="the replica that keeps failing: one job, started again after each failure")
    restarts: int
    exit_code: int | None
    exit_reason: str | None
    next_try_at: datetime | None = Field(description="when it is started again (the restart back-off)")
    log_tail: list[str] = Field(description="its log's last lines (empty for those who may not read its logs)")

    @classmethod
    def of(cls, r: Replica, log_tail: tuple[str, ...]) -> CrashLoopOut:
        return cls(
            job_id=r.job_id,
            restarts=r.restarts,
            exit_code=r.exit_code,
            exit_reason=r.exit_reason,
            next_try_at=r.backing_off_until,
            log_tail=list(log_tail),
        )


class ServiceOut(BaseModel):
    name: str
    project: str
    owner: str
    state: str = Field(description="starting, ready, degraded, idle or crash_loop: read from its replicas")
    crash_loop: CrashLoopOut | None = Field(None, description="the replica that keeps failing, while one does")
    replicas: ReplicaCounts
    endpoints: list[EndpointOut] = Field(
        description="ready replicas, where the gateway sends requests (empty for a caller who may not call it; "
        "a replica answers only the gateway anyway)"
    )
    max_concurrency: int
    url: str | None = Field(
        description="where the gateway serves it: http://<gateway>/<name>/ (null: the head runs no gateway)"
    )
    created_at: datetime
    updated_at: datetime
    min_replicas: int
    max_replicas: int
    target_concurrency: int
    scale_to_zero: bool
    public: bool
    health_path: str
    port_env: str
    gpus: float
    cpus: float
    cpu_milli: int
    memory_mib: int
    queue_limit: int
    timeout_s: float
    command: list[str] | None = Field(description="null where hidden: only its owner, a manager or an admin sees it")
    env: dict[str, str] | None
    image: str | None = Field(None, description="the OCI image its replicas run in; null: the nodes' own userland")
    gpu_power: str | None = Field(None, description="its replicas' GPU power mode; null: the project's default")
    replica_list: list[ReplicaOut]
    load: ServiceLoadOut | None = Field(None, description="null without a recent gateway report")

    @classmethod
    def of(cls, v: ServiceView, base_url: str, gateway: GatewayPlace) -> ServiceOut:
        """``base_url``: the head's, as the caller reached it; the gateway is on that host."""
        spec = v.record.spec
        return cls(
            name=spec.name,
            project=spec.project,
            owner=v.record.owner,
            state=v.state.value,
            replicas=ReplicaCounts(desired=v.record.desired, ready=v.ready, starting=v.starting),
            endpoints=[EndpointOut.of(r) for r in v.endpoints] if v.reachable else [],
            max_concurrency=spec.max_concurrency,
            url=gateway.url(base_url, service_path(spec.name)),
            created_at=v.record.created_at,
            updated_at=v.record.updated_at,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            target_concurrency=spec.target_concurrency,
            scale_to_zero=spec.scale_to_zero,
            public=spec.public,
            health_path=spec.health_path,
            port_env=spec.port_env,
            gpus=spec.gpus,
            cpus=spec.cpu_milli / CPU_MILLI,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            queue_limit=spec.queue_limit,
            timeout_s=spec.timeout_s,
            command=list(spec.command) if v.full else None,
            env=dict(spec.env) if v.full else None,
            image=spec.image,
            gpu_power=spec.gpu_power,
            replica_list=[ReplicaOut.of(r, v.load, where=v.reachable) for r in v.replicas],
            load=None if v.load is None else ServiceLoadOut.of_service(v.load),
            crash_loop=None if v.crashing is None else CrashLoopOut.of(v.crashing, v.crash_log),
        )


def service_path(name: str) -> str:
    """Where the gateway serves a service: its first path segment (``gateway/routes.route_name``),
    stripped before a replica sees the request."""
    return f"/{name}/"


def job_path(job_id: int) -> str:
    """Where the gateway serves a job's published port (``--expose``): the path keeps it."""
    return f"/jobs/{job_id}/"


class RouteOut(BaseModel):
    name: str = Field(description="a service's name, or jobs/<id> for a job's published port")
    kind: str = Field("service", description="service or job")
    project: str
    public: bool
    max_concurrency: int
    queue_limit: int
    timeout_s: float
    endpoints: list[EndpointOut]
    scale_to_zero: bool = Field(False, description="with no endpoint, a request waits for the replica it wakes")

    @classmethod
    def of_job(cls, r: JobRoute) -> RouteOut:
        return cls(
            name=job_path(r.job_id).strip("/"),
            kind="job",
            project=r.project,
            public=False,
            max_concurrency=JOB_CONCURRENCY,
            queue_limit=JOB_QUEUE,
            timeout_s=JOB_TIMEOUT_S,
            endpoints=[EndpointOut(replica=str(r.job_id), host=r.host, port=r.port)],
        )

    @classmethod
    def of(cls, r: Route) -> RouteOut:
        spec = r.record.spec
        return cls(
            name=spec.name,
            project=spec.project,
            public=spec.public,
            max_concurrency=spec.max_concurrency,
            queue_limit=spec.queue_limit,
            timeout_s=spec.timeout_s,
            endpoints=[EndpointOut.of(e) for e in r.endpoints],
            scale_to_zero=spec.scale_to_zero and spec.min_replicas == 0 < spec.max_replicas,
        )


class RoutesOut(BaseModel):
    routes: list[RouteOut]


class ReplicaLoadIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    service: str = Field(max_length=63)
    replica: str = Field(max_length=32, description="the replica's job id; '' for requests waiting for any")
    in_flight: int = Field(ge=0, le=1_000_000)
    queued: int = Field(ge=0, le=1_000_000)
    requests: int = Field(ge=0, le=2**53)
    errors: int = Field(ge=0, le=2**53)
    latency_counts: list[Annotated[int, Field(ge=0, le=2**53)]] | None = Field(
        None, max_length=MAX_BOUNDS + 1, description="answers per bucket of the report's latency_bounds, then past them"
    )
    latency_sum_s: float | None = Field(None, ge=0, le=1e12, description="those answers' latencies together")

    def line(self) -> ReplicaLoad:
        return ReplicaLoad(
            self.service,
            self.replica,
            self.in_flight,
            self.queued,
            self.requests,
            self.errors,
            tuple(self.latency_counts or ()),
            self.latency_sum_s or 0.0,
        )


class StatsIn(BaseModel):
    """A gateway's load report. The latency fields are optional (a gateway without them still
    reports load); where given, every line's counts have one more entry than the bounds."""

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(gt=0, le=3600, description="the span the counts cover")
    latency_bounds: list[float] | None = Field(
        None, min_length=1, max_length=MAX_BOUNDS, description="upper bounds (s) of the latency buckets, ascending"
    )
    replicas: list[ReplicaLoadIn] = Field(max_length=MAX_REPORT_LINES)

    @model_validator(mode="after")
    def _latency_fits(self) -> StatsIn:
        bounds = self.latency_bounds or []
        if any(b <= 0 or not math.isfinite(b) for b in bounds) or bounds != sorted(set(bounds)):
            raise ValueError("latency_bounds must be finite, positive and strictly ascending")
        for r in self.replicas:
            if r.latency_counts is not None and len(r.latency_counts) != len(bounds) + 1:
                raise ValueError(
                    f"replica {r.replica!r}: latency_counts needs {len(bounds) + 1} entries"
                    f" (one per latency_bounds, then one past them), not {len(r.latency_counts)}"
                )
        return self


class StatsOut(BaseModel):
    kept: int = Field(description="lines kept (a report for more services than the head tracks is cut)")

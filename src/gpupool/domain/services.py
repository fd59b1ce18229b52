"""Inference services (DESIGN §3): a spec people write (``ServiceSpec``), what the head keeps of it
(``ServiceRecord``), and what one replica looks like from outside (``Replica``).

A replica is an ordinary job of class ``inference`` whose spec names its service
(``JobSpec.service``) and the variable its port is passed in (``JobSpec.port_env``): the job
lifecycle, placement, quota and events are the jobs' own, nothing here duplicates them. A service
has no stored state machine either: its state is read from its replicas (``service_state``), so it
cannot disagree with them.

``ServiceSpec.create`` is the one place a service is validated, for the API, the CLI and tests.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpupool.domain import bounds
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec
from gpupool.domain.resources import CPU_MILLI

# A DNS label: the name may become a host name or a path segment of the gateway's URL.
SERVICE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
MAX_REPLICAS = 64
MAX_CONCURRENCY = 10_000
MAX_QUEUE = 100_000
MAX_HEALTH_PATH = 256
MAX_PORT_ENV = 64
MAX_TIMEOUT_S = 3600.0
MAX_DELAY_S = 86400.0
# First path segments the gateway answers itself (``/jobs/<id>/`` is a job's published port,
# ``/metrics`` its own series, ``/-/healthz`` its health): no service may take them.
RESERVED_NAMES = frozenset({"jobs", "metrics", "-"})
_HEALTH_RE = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*$")  # RFC 3986 path and query characters
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ServiceState(enum.StrEnum):
    """Read from the replicas, never stored."""

    STARTING = "starting"  # replicas wanted, none ready yet
    READY = "ready"  # as many ready as wanted
    DEGRADED = "degraded"  # some ready, fewer than wanted (a replica died, or is being rolled)
    IDLE = "idle"  # no replica wanted (scaled to zero, or --replicas 0)
    CRASH_LOOP = "crash_loop"  # none ready, and a replica keeps failing: it waits longer before each try


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """What a service asks for. The replica template is ``replica_spec()``; ``max_concurrency``,
    ``queue_limit`` and ``timeout_s`` are the gateway's; the rest of the numbers the autoscaler's."""

    name: str
    project: str
    command: tuple[str, ...]
    gpus: float = 1.0
    cpu_milli: int = 0  # per replica, millicores (JobSpec's)
    memory_mib: int = 0
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    workdir: str | None = None
    min_replicas: int = 1
    max_replicas: int = 1
    max_concurrency: int = 16
    target_concurrency: int = 16  # in-flight + queued requests per replica the autoscaler aims at
    health_path: str = "/healthz"
    port_env: str = "PORT"
    public: bool = False
    scale_to_zero: bool = False
    queue_limit: int = 100
    timeout_s: float = 60.0
    scale_down_delay_s: float = 60.0
    ready_timeout_s: float = 120.0  # a replica not ready this long after it started gets an event saying why
    image: str | None = None  # the OCI image its replicas run in (domain/images.py); None: the node's own
    gpu_power: str | None = None  # its replicas' GPU power mode (domain/power.py); None: the project's

    @property
    def autoscaled(self) -> bool:
        return self.min_replicas != self.max_replicas

    @property
    def floor(self) -> int:
        """The fewest replicas it runs: ``min_replicas``, but at least one unless it may scale to
        zero (``--min-replicas 0`` alone keeps one replica warm)."""
        if self.scale_to_zero or self.min_replicas > 0:
            return self.min_replicas
        return min(1, self.max_replicas)

    def replica_spec(self) -> JobSpec:
        """The job every replica of this version runs. Two replicas run the same version exactly
        when their specs are equal: that is what a rolling update compares."""
        job = JobSpec.create(
            command=self.command,
            name=self.name,
            project=self.project,
            gpus=self.gpus,
            cpus=f"{self.cpu_milli}m",
            memory=self.memory_mib or None,
            priority="inference",
            env=self.env,
            workdir=self.workdir,
            image=self.image,
            gpu_power=self.gpu_power,
            # A replica that dies is the same replica started again, after a growing wait (the
            # restart back-off): its failures are one job's restarts, not a new job each time.
            max_restarts=bounds.MAX_RESTARTS,
        )
        return dataclasses.replace(job, service=self.name, port_env=self.port_env)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["command"], out["env"] = list(self.command), dict(self.env)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServiceSpec:
        """For specs gpupool stored itself: not validated again."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "cpus" in data and "cpu_milli" not in data:  # stored before millicores: whole cores
            values["cpu_milli"] = int(data["cpus"]) * CPU_MILLI
        values["command"], values["env"] = tuple(values["command"]), dict(values.get("env", {}))
        return cls(**values)

    @classmethod
    def create(
        cls,
        *,
        name: str,
        command: Sequence[str],
        project: str | None = None,
        replicas: int | None = None,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
        gpus: float = 1.0,
        cpus: float | str = 0,
        memory: str | int | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        max_concurrency: int = 16,
        target_concurrency: int | None = None,
        health_path: str = "/healthz",
        port_env: str = "PORT",
        public: bool = False,
        scale_to_zero: bool = False,
        queue_limit: int = 100,
        timeout_s: float = 60.0,
        scale_down_delay_s: float = 60.0,
        ready_timeout_s: float = 120.0,
        image: str | None = None,
        gpu_power: str | None = None,
    ) -> ServiceSpec:
        check_service_name(name)
        low, high = _replica_range(replicas, min_replicas, max_replicas)
        bounds.whole("max concurrency", max_concurrency, 1, MAX_CONCURRENCY)
        target = max_concurrency if target_concurrency is None else target_concurrency
        bounds.whole("target concurrency", target, 1, max_concurrency)
        bounds.whole("queue limit", queue_limit, 0, MAX_QUEUE)
        _seconds("timeout", timeout_s, 0.1, MAX_TIMEOUT_S)
        _seconds("scale-down delay", scale_down_delay_s, 0.0, MAX_DELAY_S)
        _seconds("ready timeout", ready_timeout_s, 1.0, MAX_TIMEOUT_S)
        check_health_path(health_path)
        if not isinstance(port_env, str) or len(port_env) > MAX_PORT_ENV or not _ENV_RE.match(port_env):
            raise InvalidInput(f"invalid --port-env {bounds.shown(port_env)}: a variable name like PORT, at most 64")
        if scale_to_zero and low != 0:
            raise InvalidInput(f"scale to zero needs --min-replicas 0, got {low}")
        # The template is checked now, as a submission would be: a bad command or size is refused here.
        spec = cls(
            name=name,
            project=project or "default",
            command=tuple(command),
            gpus=gpus,
            cpu_milli=0,
            env=dict(env or {}),
            workdir=workdir,
            min_replicas=low,
            max_replicas=high,
            max_concurrency=max_concurrency,
            target_concurrency=target,
            health_path=health_path,
            port_env=port_env,
            public=bool(public),
            scale_to_zero=bool(scale_to_zero),
            queue_limit=queue_limit,
            timeout_s=float(timeout_s),
            scale_down_delay_s=float(scale_down_delay_s),
            ready_timeout_s=float(ready_timeout_s),
            image=image,
        )
        job = JobSpec.create(
            command=command,
            name=name,
            project=project,
            gpus=gpus,
            cpus=cpus,
            memory=memory,
            env=env,
            image=image,
            gpu_power=gpu_power,
        )
        if port_env in job.env:
            raise InvalidInput(f"--env sets {port_env}, the variable gpupool passes the replica's port in")
        return dataclasses.replace(
            spec,
            project=job.project,
            gpus=job.gpus,
            cpu_milli=job.cpu_milli,
            memory_mib=job.memory_mib,
            gpu_power=job.gpu_power,
        )


def check_service_name(name: object) -> str:
    if not isinstance(name, str) or not SERVICE_NAME_RE.match(name):
        raise InvalidInput(
            f"invalid service name {bounds.shown(name)}: 1 to 63 lower-case letters, digits and '-',"
            " starting and ending with a letter or digit"
        )
    if name in RESERVED_NAMES:
        raise InvalidInput(
            f"service name {name!r} is reserved: the gateway serves /{name}/ itself"
            f" ({', '.join(sorted(RESERVED_NAMES))} are taken); choose another name",
            code="reserved_name",
        )
    return name


def check_health_path(path: object) -> str:
    if not isinstance(path, str) or len(path) > MAX_HEALTH_PATH or not _HEALTH_RE.match(path):
        raise InvalidInput(
            f"invalid health path {bounds.shown(path)}: a URL path starting with '/', at most {MAX_HEALTH_PATH}"
            " characters, without spaces"
        )
    return path


def check_replicas(what: str, value: object) -> int:
    return bounds.whole(what, value, 0, MAX_REPLICAS)


def _replica_range(replicas: int | None, low: int | None, high: int | None) -> tuple[int, int]:
    """``--replicas N`` is min = max = N; with neither, one replica."""
    if replicas is not None:
        if low is not None or high is not None:
            raise InvalidInput("give --replicas, or --min-replicas and --max-replicas, not both")
        n = check_replicas("replicas", replicas)
        return n, n
    if low is None and high is None:
        return 1, 1
    low = check_replicas("min replicas", 1 if low is None else low)
    high = check_replicas("max replicas", max(low, 1) if high is None else high)
    if low > high:
        raise InvalidInput(f"min replicas ({low}) must not exceed max replicas ({high})")
    return low, high


def _seconds(what: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidInput(f"{what} must be from {low:g} to {high:g} seconds, got {bounds.shown(value)}")


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    """A service as the head keeps it. ``desired``: how many replicas it wants now (the spec's
    count, or the autoscaler's, or ``service scale``'s); ``autoscale``: the autoscaler's memory."""

    spec: ServiceSpec
    owner: str
    run_as: str | None  # the Unix account its replicas run as (None: the node's own user)
    desired: int
    created_at: datetime
    updated_at: datetime
    autoscale: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica: its job, where it runs and whether it answers its health check."""

    job_id: int
    state: str  # the job's state
    current: bool  # runs the service's current version (its spec equals ``replica_spec()``)
    stopping: bool  # asked to stop (cancelled, scaled down, rolled)
    node: str | None = None
    host: str | None = None
    port: int | None = None
    ready: bool = False
    started_at: datetime | None = None
    worker_id: int | None = None  # its current attempt's worker
    restarts: int = 0  # how many times it failed and was started again
    exit_code: int | None = None  # how its last attempt ended
    exit_reason: str | None = None
    backing_off_until: datetime | None = None  # it failed and waits before its next try (restart back-off)
    last_node: str | None = None  # where its last attempt ran (its log is there)
    ready_at: datetime | None = None  # since when it answers its health check

    @property
    def starting(self) -> bool:
        return not self.ready and not self.stopping

    @property
    def crashing(self) -> bool:
        """It failed and waits before it is started again."""
        return self.backing_off_until is not None and self.restarts > 0 and not self.stopping


def service_state(desired: int, ready: int, crashing: bool = False) -> ServiceState:
    if desired == 0 and ready == 0:
        return ServiceState.IDLE
    if ready == 0:
        return ServiceState.CRASH_LOOP if crashing else ServiceState.STARTING
    return ServiceState.READY if ready >= desired else ServiceState.DEGRADED

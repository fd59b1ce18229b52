"""Tables. Separate from the domain types and from the API schemas on purpose (dstack style):
the database shape can change by migration without touching what users see."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from gpupool.store.orm_base import Base as Base  # re-exported: its metadata holds every module's tables


class JobRow(Base):
    """Every ORM update of a job is guarded by the state it was read in: ``state`` is the row's
    version, so an UPDATE reads ``WHERE id = ? AND state = <as read>`` and a row another
    transaction moved meanwhile raises (``Database.tx`` turns that into ``Stale``) instead of
    being overwritten. On SQLite a transaction begins at its first write, so a read then a write
    is not atomic without this; on PostgreSQL the rows are also locked when read for an update."""

    __tablename__ = "jobs"
    # 0031: a user's arrays with an unfinished task (--max-user-arrays, at every array submitted),
    # counted from the index alone
    __table_args__ = (Index("ix_jobs_owner_state_array", "owner", "state", "array_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    project: Mapped[str] = mapped_column(String(64), index=True)
    owner: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), index=True)
    command: Mapped[list[str]] = mapped_column(JSON)
    gpus: Mapped[float] = mapped_column(Float)
    workers: Mapped[int] = mapped_column(Integer)
    cpu_milli: Mapped[int] = mapped_column(Integer, server_default="0")  # per worker, millicores (0016; was cores)
    memory_mib: Mapped[int] = mapped_column(Integer)
    priority: Mapped[str] = mapped_column(String(16))
    max_restarts: Mapped[int] = mapped_column(Integer)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    workdir: Mapped[str | None] = mapped_column(Text, nullable=True)
    gpu_model: Mapped[str | None] = mapped_column(String(128), nullable=True)
    max_runtime_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpu_memory_mib: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    checkpoint_dir: Mapped[str | None] = mapped_column(Text, nullable=True)  # 0004
    reason_code: Mapped[str | None] = mapped_column(String(32), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)  # oom (0010; 32: 0018)
    run_as: Mapped[str | None] = mapped_column(String(32), nullable=True)  # Unix account (0011)
    # A task of an array (0013): the array's id is its first task's job id; null otherwise.
    array_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    array_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    array_max_running: Mapped[int | None] = mapped_column(Integer, nullable=True)  # %N: at most N at once
    # 0031: on an array's first task, the indices of its tasks not written yet ("1-999"); null
    # once the controller (or the first read that lists them) has written them (store/arrays.py)
    array_unmade: Mapped[str | None] = mapped_column(Text, nullable=True, index=True)
    # A replica of a service (0014): the service's name and the variable its port is passed in.
    service: Mapped[str | None] = mapped_column(String(63), nullable=True, index=True)
    port_env: Mapped[str | None] = mapped_column(String(64), nullable=True)
    expose: Mapped[int | None] = mapped_column(Integer, nullable=True)  # 0015: a port the gateway publishes
    # 0017: the OCI image its workers run in, and the digest the last attempt ran (its manifest's)
    image: Mapped[str | None] = mapped_column(String(512), nullable=True)
    image_digest: Mapped[str | None] = mapped_column(String(80), nullable=True)
    gpu_power: Mapped[str | None] = mapped_column(String(16), nullable=True)  # 0020: max, efficient, 400W
    max_workers: Mapped[int | None] = mapped_column(Integer, nullable=True)  # 0029: elastic, its most workers
    # 0030: an elastic job's attempt's rendezvous, "address:port" on worker 0's node: what workers
    # added later are told (the same for every worker of the attempt)
    rendezvous: Mapped[str | None] = mapped_column(String(300), nullable=True)
    starts: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    # Why the job is being stopped, or why its last attempt was (domain.outcome.StopReason); cleared
    # when an attempt starts (0007: replaces four flags).
    stop_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # Not scheduled before this time: an idle job preempted for others yields to them first (0006).
    not_before: Mapped[datetime | None] = mapped_column(nullable=True)
    submitted_at: Mapped[datetime] = mapped_column()
    started_at: Mapped[datetime | None] = mapped_column(nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)

    __mapper_args__ = {"version_id_col": state, "version_id_generator": False}


class WorkerRow(Base):
    """One process of one attempt of a job. Rows of earlier attempts stay, as history."""

    __tablename__ = "workers"
    __table_args__ = (Index("ix_workers_job_attempt", "job_id", "attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    worker: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(128))
    gpus: Mapped[list[int]] = mapped_column(JSON)
    gpu_share: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_memory_mib: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cpus: Mapped[list[int]] = mapped_column(JSON)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    # A fraction of a core: its millicores on the unpinned cores ``cpus`` (0016); 0: ``cpus`` pinned
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # launching: decided, process not yet confirmed; running: supervisor alive; exited; lost.
    status: Mapped[str] = mapped_column(String(16), index=True)
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)  # oom (0010; 32: 0018)
    # Its cgroup's readings, from the telemetry step (0011): None without a cgroup, or not read yet.
    memory_used_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    memory_peak_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cpu_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    cpu_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    usage_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # A service replica's (0014): the port it was given, and since when it answers its health check.
    port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ready_at: Mapped[datetime | None] = mapped_column(nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # The GPU power setting it launched with (0023, ``PowerSetting.to_json``); None: the GPU's default.
    gpu_power: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # 0030: its elastic job runs on without it (issue 35): stopped by a shrink (live: leaving), or
    # failed while the others ran on. Its exit is not judged as the job's.
    released: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    address: Mapped[str] = mapped_column(String(256))
    cpus: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column()
    # The admin's wish, apart from the state: a node drained while down comes back drained (0003).
    drain_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # What the node enforces around each job, as it reported (0010): {users, memory, cpus, devices, kill}
    isolation: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    power_budget_w: Mapped[float | None] = mapped_column(Float, nullable=True)  # its own budget (0023)


class GpuRow(Base):
    __tablename__ = "gpus"

    node: Mapped[str] = mapped_column(ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(128))
    memory_mib: Mapped[int] = mapped_column(Integer)
    simulated: Mapped[bool] = mapped_column(Boolean)
    healthy: Mapped[bool] = mapped_column(Boolean, default=True)  # what the probe reports, overwritten by it
    nvlink_group: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # An admin took the GPU out of service (gpupool drain NODE --gpu I); the probe never touches it (0003).
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # What its power limit may be set to and its default, in watts, as its probe says (issue 33, 0021).
    power_min_w: Mapped[int | None] = mapped_column(Integer, nullable=True)
    power_max_w: Mapped[int | None] = mapped_column(Integer, nullable=True)
    power_default_w: Mapped[int | None] = mapped_column(Integer, nullable=True)


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column()
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), nullable=True, index=True)
    node: Mapped[str | None] = mapped_column(String(128), nullable=True)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)


class TokenRow(Base):
    """API tokens, stored as SHA-256 hashes; the plain token is shown once and never stored."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column()
    name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # read | submit | admin; null: the widest its user's role allows (the join token has none)
    scope: Mapped[str | None] = mapped_column(String(16), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # written at most once a minute per token (``store.tokens.LAST_USED_EVERY``), not per request
    last_used_at: Mapped[datetime | None] = mapped_column(nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(nullable=True)


class UserRow(Base):
    """People. ``tokens.user`` names a user (no foreign key: the join token belongs to nobody)."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    unix_user: Mapped[str | None] = mapped_column(String(32), nullable=True)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column()


class ProjectUsageRow(Base):
    """Each project's recent GPU use: an exponential moving average (in GPUs) whose weight halves
    every half-life, so that over days each project converges to its fair share."""

    __tablename__ = "project_usage"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    recent_gpus: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column()


class ProjectRow(Base):
    __tablename__ = "projects"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    quota: Mapped[float] = mapped_column(Float)
    limit: Mapped[float | None] = mapped_column(Float, nullable=True)
    weight: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column()
    # Preempt the project's interactive jobs idle this long while others wait (0006); null: never.
    idle_timeout_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Every user may submit here, member or not (0009): true for ``default`` unless an admin closes it.
    everyone: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Its jobs' GPU power mode when they name none (0022, issue 33); null: max.
    gpu_power: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # The unit above it (0025, issue 34); null: a child of the root, as every project was before.
    parent: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    # GPUs one user may hold here at once, and per user {user: GPUs or null} (0026, issue 34); null: none.
    user_limit: Mapped[float | None] = mapped_column(Float, nullable=True)
    user_limits: Mapped[dict[str, float | None] | None] = mapped_column(JSON, nullable=True)
    # At most this many GPUs of its unused quota are lent (0027, issue 34); null: all, as before.
    lend_limit: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Per-GPU-model quota and limit, model -> GPUs (0028, issue 34 item 2); null: totals only.
    quota_by_model: Mapped[dict[str, float] | None] = mapped_column(JSON, nullable=True)
    limit_by_model: Mapped[dict[str, float] | None] = mapped_column(JSON, nullable=True)


class ProjectMemberRow(Base):
    """Who may submit to a project (0009): a ``member`` acts on their own jobs there, a ``manager``
    on every job of the project. No foreign keys: a deleted user's history keeps its names."""

    __tablename__ = "project_members"

    project: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column()


class UserUsageRow(Base):
    """Each user's recent GPU use within a project, decayed like ``ProjectUsageRow`` (0009): within
    a project, the jobs of whoever used less lately go first."""

    __tablename__ = "user_usage"

    project: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    recent_gpus: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column()


class AuditRow(Base):
    """Who changed what, from where, and how it went (0009): one row per request that changes
    something, and per failed sign-in. Kept 90 days."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(index=True)
    user: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(256))
    result: Mapped[str] = mapped_column(String(16))  # ok | denied | invalid | failed
    status: Mapped[int] = mapped_column(Integer)  # the HTTP status answered
    client: Mapped[str | None] = mapped_column(String(64), nullable=True)


class IdempotencyKeyRow(Base):
    """A submission made with an ``Idempotency-Key`` (0012): the same key from the same user within
    24 hours gets this job back instead of a second one."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("owner", "key", name="uq_idempotency_owner_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(64))  # SHA-256 of the submitted spec
    job_id: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(index=True)


class ServiceRow(Base):
    """An inference service (0014): its spec as ``ServiceSpec.to_dict``, how many replicas it wants
    now, and the autoscaler's memory. Its replicas are jobs whose ``service`` names it."""

    __tablename__ = "services"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    project: Mapped[str] = mapped_column(String(64), index=True)
    owner: Mapped[str] = mapped_column(String(64))
    run_as: Mapped[str | None] = mapped_column(String(32), nullable=True)  # its replicas' Unix account
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    desired: Mapped[int] = mapped_column(Integer)
    autoscale: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column()
    updated_at: Mapped[datetime] = mapped_column()


class RegistryLoginRow(Base):
    """A user's login to an image registry (0019): its secret sealed (``store/sealing.py``), never plain."""

    __tablename__ = "registry_logins"

    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)  # the registry's
    username: Mapped[str] = mapped_column(String(256))
    sealed: Mapped[str] = mapped_column(Text)
    saved_at: Mapped[datetime] = mapped_column()


# The telemetry tables live in their own module (this one stays readable); importing it here
# registers them on Base wherever the schema is read (migrations, the tests' schema comparison).
import gpupool.store.orm_telemetry  # noqa: E402, F401

"""Jobs: what a user asks for (``JobSpec``) and where its workers run (``Placement``).

``JobSpec.create`` is the one place a submission is validated, so the API, the CLI, trace
loaders and tests reject the same inputs with the same messages.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ParamSpec, TypedDict, TypeVar

from gpupool.domain import job_fields
from gpupool.domain.job_fields import Priority as Priority
from gpupool.domain.resources import CPU_MILLI


class JobState(enum.StrEnum):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def active(self) -> bool:
        """Holds (or is about to hold) resources on nodes."""
        return self in (JobState.STARTING, JobState.RUNNING)


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# Not finished: what `gpupool jobs` lists and what keeps a project from being deleted.
ACTIVE_JOB_STATES = tuple(s.value for s in JobState if s not in TERMINAL_STATES)


class StopReason(enum.StrEnum):
    """Why a job is being stopped, or why its last attempt was. Cleared when an attempt starts.

    A worker that fails or is lost needs no reason here: its exit says it (``judge``)."""

    CANCEL = "cancel"  # a person cancelled it
    TIMEOUT = "timeout"  # it ran past its max runtime: it ends failed
    PREEMPT = "preempt"  # the scheduler gave its GPUs to others (reclaim, priority): requeued
    IDLE = "idle"  # its GPUs sat idle past its project's idle timeout: requeued, held back a while

    @property
    def requeues(self) -> bool:
        """The job goes back to the queue, and its next attempt gets ``GPUPOOL_PREEMPTED=1``."""
        return self in (StopReason.PREEMPT, StopReason.IDLE)

    @property
    def ends_job(self) -> bool:
        return not self.requeues


# Stored values of the stops that send a job back to the queue.
REQUEUING_STOPS = tuple(r.value for r in StopReason if r.requeues)


def may_replace(current: StopReason | None, new: StopReason) -> bool:
    """Whether ``new`` overrides the stop already under way. Ending a job (cancel, timeout)
    overrides a requeue (preempt, idle); otherwise the first reason stands, so a cancelled job
    is not turned into a timed-out one, nor a job being preempted preempted twice."""
    if current is None:
        return True
    return current.requeues and new.ends_job


class Submission(TypedDict, total=False):
    """A submission as people and scripts write it: the keyword arguments of ``JobSpec.create``,
    the body of ``POST /api/v1/jobs`` and the typed keywords of ``GpupoolClient.submit``. Sizes
    may be strings (``8G``); ``JobSpec`` holds them normalised (``memory_mib``)."""

    command: Sequence[str]
    name: str | None
    project: str | None
    gpus: float
    workers: int | str  # a gang of N, or an elastic range "MIN:MAX" (issue 35)
    max_workers: int | None
    cpus: float | str  # cores (0.5) or millicores ("500m"); JobSpec holds cpu_milli
    memory: str | int | None
    priority: str
    max_restarts: int
    env: Mapping[str, str] | None
    workdir: str | None
    gpu_model: str | None
    max_runtime_s: int | None
    gpu_memory: str | int | None
    checkpoint_dir: str | None
    expose: int | None
    image: str | None
    gpu_power: str | None


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _taking(declared: Callable[_P, object]) -> Callable[[Callable[..., _R]], Callable[_P, _R]]:
    """Give the function decorated ``declared``'s parameters: for the type checker, which checks its
    callers against that one declaration instead of a copy of it, and for ``inspect.signature``."""

    def same(made: Callable[..., _R]) -> Callable[_P, _R]:
        made.__wrapped__ = declared  # type: ignore[attr-defined]  # what inspect.signature follows
        return made

    return same


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What was asked for. ``gpus``, ``cpu_milli`` and ``memory_mib`` are per worker.

    CPUs are integer millicores, as Kubernetes counts them: whole cores (a multiple of 1000) are
    pinned, the worker's own; a fraction runs on the node's unpinned cores under a CPU quota."""

    command: tuple[str, ...]
    name: str = ""
    project: str = "default"
    gpus: float = 1.0
    workers: int = 1
    cpu_milli: int = 0
    memory_mib: int = 0
    priority: Priority = Priority.TRAIN
    max_restarts: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    gpu_model: str | None = None
    max_runtime_s: int | None = None
    gpu_memory_mib: int = 0  # fraction: memory it needs on the shared GPU; whole: least memory per GPU
    # Absolute; every worker gets it as GPUPOOL_CHECKPOINT_DIR. The job owns it: gpupool neither
    # creates it nor touches what is in it.
    checkpoint_dir: str | None = None
    # A replica of a service (domain.services): the service's name, and the variable its port is
    # passed in (a free port on its node, picked at each start). Set by the service layer only.
    service: str | None = None
    port_env: str | None = None
    # A port worker 0 listens on, published by the head's gateway at /jobs/<id>/ to its owner, its
    # project's managers and admins (a notebook one link away). Any class may publish one.
    expose: int | None = None
    # An OCI image its workers run in (domain/images.py: a registry image, an imported name, or an
    # OCI layout or archive on a shared path): its root, with the node's GPUs, inside the same walls.
    image: str | None = None
    gpu_power: str | None = None  # GPU power mode (domain/power.py): max, efficient, 400W; None: the project's
    # Elastic (issue 35): it may run on ``workers`` (its minimum, all that counts against its project's
    # quota and all it needs to start) up to this many; the scheduler adds and removes the workers above
    # the minimum. None: a rigid gang of ``workers``.
    max_workers: int | None = None

    @property
    def total_gpus(self) -> float:
        """GPUs of its minimum: what it needs to start and what counts against its quota."""
        return self.gpus * self.workers

    @property
    def elastic(self) -> bool:
        return self.max_workers is not None

    @property
    def most_workers(self) -> int:
        """The widest it may run: its maximum if elastic, else its gang size."""
        return self.max_workers if self.max_workers is not None else self.workers

    @property
    def workers_text(self) -> str:
        """``4`` for a gang, ``2:8`` for an elastic job: as ``--workers`` takes it."""
        return f"{self.workers}:{self.max_workers}" if self.max_workers is not None else str(self.workers)

    @property
    def cpus(self) -> float:
        """Cores per worker, as people write them (0.5, 2): for showing, never for counting."""
        return self.cpu_milli / CPU_MILLI

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data (lists, dicts, strings), named as the field: the store's
        columns and the API's job fields are these names, so neither lists them by hand."""
        out: dict[str, Any] = {}
        for name in SPEC_FIELDS:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, enum.Enum):
                value = value.value
            elif isinstance(value, Mapping):
                value = dict(value)
            out[name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """The inverse of ``to_dict`` for data gpupool wrote itself (its own rows): not validated
        again, so a job stored under older rules still loads."""
        if "cpu_milli" not in data and "cpus" in data:  # written before millicores (a service's spec)
            data = {**data, "cpu_milli": int(data["cpus"]) * CPU_MILLI}
        # A field added since (``image``) is missing from what older heads wrote: its default.
        values = {name: data[name] for name in SPEC_FIELDS if name in data}
        values["command"] = tuple(values["command"])
        values["priority"] = Priority(values["priority"])
        values["env"] = dict(values["env"])
        return cls(**values)

    def submission(self) -> dict[str, Any]:
        """The body of ``POST /api/v1/jobs`` that asks for exactly this spec: the keyword
        arguments of ``create`` (memory as MiB numbers), leaving out what is unset."""
        return job_fields.submission_body({name: getattr(self, name) for name in SPEC_FIELDS})

    @property
    def quota_bound(self) -> bool:
        """interactive and inference run only inside their project's quota (DESIGN §3)."""
        return self.priority is not Priority.TRAIN

    @staticmethod
    @_taking(job_fields.checked)
    def create(**asked: Any) -> JobSpec:
        """The spec these ask for, checked (``domain/job_fields.checked``: the one rule, and the one
        declaration of what a job may ask for, which this takes as its own signature)."""
        return JobSpec(**job_fields.checked(**asked))


SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobSpec))


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one worker of a job runs: a node, GPU indices on it, CPU cores on it.

    ``cpus`` are the worker's pinned cores when it asked for whole cores (``cpu_milli`` 0); for a
    fraction of a core (``cpu_milli`` > 0) they are the node's cores no one had pinned when it was
    placed, which it shares, held to ``cpu_milli`` by a CPU quota."""

    worker: int
    node: str
    gpus: tuple[int, ...]
    gpu_share: float = 0.0  # > 0 only for a fractional worker: its share of gpus[0]
    gpu_memory_mib: int = 0  # a fractional worker's part of gpus[0]'s memory
    cpus: tuple[int, ...] = ()
    memory_mib: int = 0
    cpu_milli: int = 0

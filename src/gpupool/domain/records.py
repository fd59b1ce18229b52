"""Read models: what the store hands back to services, the controller and the API."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from gpupool.domain.jobs import JobSpec, JobState, Placement, StopReason
from gpupool.domain.launch import WorkerHandle
from gpupool.domain.nodes import Node


class WorkerStatus(enum.StrEnum):
    LAUNCHING = "launching"  # decided and written, process not confirmed yet
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"

    @property
    def holds_resources(self) -> bool:
        return self in (WorkerStatus.LAUNCHING, WorkerStatus.RUNNING)


# Workers whose processes hold their GPUs: the store counts resources by these, not by job state.
LIVE_WORKER_STATES = tuple(s.value for s in WorkerStatus if s.holds_resources)


# A worker cgroup's reading as its node gives it: memory now and at its peak (bytes), CPU time (s).
UsageReading = tuple[int | None, int | None, float | None]


@dataclass(frozen=True, slots=True)
class WorkerUsage:
    """What one live worker's cgroup says it uses, as of the last telemetry reading: memory now and
    at its peak (MiB, its descendants included), and CPU as a percentage of one core since the
    reading before (None until there were two)."""

    worker: int
    memory_mib: int | None
    memory_peak_mib: int | None
    cpu_pct: float | None
    at: datetime


@dataclass(frozen=True, slots=True)
class LiveUsage:
    """A running worker's reading with whose it is (for /metrics)."""

    job_id: int
    project: str
    owner: str
    node: str
    usage: WorkerUsage


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    id: int
    job_id: int
    attempt: int
    placement: Placement
    status: WorkerStatus
    handle: WorkerHandle | None
    exit_code: int | None
    started_at: datetime | None
    finished_at: datetime | None
    exit_reason: str | None = None  # why it ended, when its node knows: "oom" (its memory limit)


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: int
    spec: JobSpec
    owner: str
    state: JobState
    placements: tuple[Placement, ...]
    reason_code: str | None
    reason: str | None
    exit_code: int | None
    starts: int
    restarts: int
    stop_reason: StopReason | None  # why it is being stopped, or why its last attempt was
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    exit_reason: str | None = None  # of the worker whose exit ended it: "oom"
    image_digest: str | None = None  # with an image: the manifest digest its last attempt ran
    run_as: str | None = None  # the Unix account its workers run as, fixed at submit; None: the node's user
    usage: tuple[WorkerUsage, ...] = ()  # of its live workers that have a cgroup, by worker
    array_id: int | None = None  # a task of an array: the array's id (its first task's job id)
    array_index: int | None = None

    @property
    def cancel_requested(self) -> bool:
        """Being stopped for good (cancelled, or past its max runtime) but not ended yet."""
        return self.stop_reason is not None and self.stop_reason.ends_job and not self.state.terminal

    @property
    def preempted(self) -> bool:
        """Waiting again after a preemption: its next attempt gets ``GPUPOOL_PREEMPTED=1``."""
        return self.stop_reason is not None and self.stop_reason.requeues and not self.state.active


@dataclass(frozen=True, slots=True)
class ArraySummary:
    """An array as one line: its first task (whose id is the array's) and its tasks by state."""

    first: JobRecord
    tasks: int
    by_state: dict[str, int]
    max_running: int | None = None


@dataclass(frozen=True, slots=True)
class Event:
    time: datetime
    kind: str
    message: str
    job_id: int | None = None
    node: str | None = None
    id: int | None = None  # its place in the event log: pages of a job's events start after one


@dataclass(frozen=True, slots=True)
class NodeRecord:
    node: Node
    gpus_free: int
    simulated: bool
    used_gpus: dict[int, list[int]]  # GPU index -> ids of the jobs on it
    drain_requested: bool = False  # an admin drained it; a node that is down comes back drained
    disabled_gpus: frozenset[int] = frozenset()  # GPUs an admin took out of service
    jobs: tuple[int, ...] = ()  # ids of the jobs with a live worker on it, GPUs or not

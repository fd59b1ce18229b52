"""What a scheduling cycle decides. The controller's applier carries these out."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from gpupool.domain.jobs import Placement

if TYPE_CHECKING:
    from gpupool.domain.snapshot import PendingJob


class ReasonCode(enum.StrEnum):
    """Why a job is still pending. Stable strings: scripts match on them."""

    NO_NODES = "no_nodes"
    UNSATISFIABLE = "unsatisfiable"
    RESOURCES = "resources"
    FRAGMENTED = "fragmented"
    GANG = "gang"
    CPUS = "cpus"
    MEMORY = "memory"
    GPU_MODEL = "gpu_model"
    PRIORITY = "priority"
    QUOTA = "quota"
    LIMIT = "limit"
    RECLAIM = "reclaim"  # GPUs are being taken back for this job; it starts when they are free
    PREEMPTING = "preempting"  # lower-priority jobs of its project are being stopped for it
    BACKFILL = "backfill"  # it would fit, but in GPUs held for the job first in line
    IDLE_HOLD = "idle_hold"  # preempted for sitting idle: the jobs that waited go first
    BACKOFF = "backoff"  # failed and requeued: it waits a growing while before its next attempt
    ARRAY_LIMIT = "array_limit"  # its array already runs as many tasks as its %N allows
    IMAGE = "image"  # a node could not get its image (--image) now: it waits, and is tried again
    POWER = "power"  # it would take the pool, or its node, over its power budget (issue 33)
    USER_LIMIT = "user_limit"  # its owner holds what their limit in the project allows (issue 34)


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str


@dataclass(frozen=True, slots=True)
class StartJob:
    job_id: int
    placements: tuple[Placement, ...]
    # Watts each of its GPUs is limited to so that it fits a power budget (issue 33): the Applier
    # launches it under the lower of this and the setting its mode resolves to. None: as asked.
    power_cap_w: float | None = None


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop a running job (SIGTERM, grace, SIGKILL) and requeue it, restarts kept."""

    job_id: int
    message: str
    for_job: int  # the waiting job the GPUs go to


@dataclass(frozen=True, slots=True)
class GrowJob:
    """Add workers to a running elastic job (issue 35), each where its placement says: the job runs
    on, and its workers' elastic rendezvous takes the newcomers in."""

    job_id: int
    placements: tuple[Placement, ...]  # the new workers' only; their ``worker`` numbers are unused ones
    message: str  # for its events: "grew to 6 workers: GPUs free on node-3"


@dataclass(frozen=True, slots=True)
class ShrinkJob:
    """Stop some of a running elastic job's workers above its minimum (SIGTERM, grace, SIGKILL,
    as a preemption): the job runs on with the others, never below its minimum."""

    job_id: int
    workers: tuple[int, ...]  # the workers to stop, by number (never worker 0: it hosts the rendezvous)
    message: str  # for its events: "shrank to 4 workers: reclaimed for project nlp"
    for_job: int | None = None  # the waiting job the GPUs go to, if one


@dataclass(frozen=True, slots=True)
class CycleResult:
    starts: tuple[StartJob, ...] = ()
    pending: dict[int, Reason] = field(default_factory=dict)
    preemptions: tuple[Preempt, ...] = ()
    # When the decisions would change by time alone, with nothing arriving or ending (a borrower's
    # job reaching the minimum run before it may be reclaimed): the caller runs a cycle by then.
    wake_at: datetime | None = None
    # The jobs ``starts`` start, as the cycle's snapshot had them (spec, owner, submit time): the
    # caller launches from these, not from a second read that a cancel or edit may have changed.
    started: Mapping[int, PendingJob] = field(default_factory=dict)
    # Elastic jobs (issue 35): workers added to running jobs, and workers above a minimum stopped.
    grows: tuple[GrowJob, ...] = ()
    shrinks: tuple[ShrinkJob, ...] = ()

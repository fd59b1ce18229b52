"""The frozen input of one scheduling cycle.

The controller builds it from the store, the simulator from its event queue; the scheduler
cannot tell the two apart, which is the point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: int
    spec: JobSpec
    submitted_at: datetime
    restarts: int = 0
    owner: str = ""  # who submitted it: within a project, the jobs of whoever used less go first


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job whose workers hold resources (running, starting, or being killed)."""

    id: int
    spec: JobSpec
    placements: tuple[Placement, ...]
    started_at: datetime | None
    stopping: bool = False  # being cancelled or preempted: its resources are on their way back
    owner: str = ""

    @property
    def preemptible(self) -> bool:
        return not self.stopping and not self.spec.quota_bound


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: datetime
    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    projects: tuple[Project, ...] = ()
    recent_usage: Mapping[str, float] = field(default_factory=dict)  # GPUs held on average lately, by project
    # The same per (project, user): within a project, whoever used less lately goes first.
    user_usage: Mapping[tuple[str, str], float] = field(default_factory=dict)

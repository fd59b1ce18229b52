"""The frozen input of one scheduling cycle.

The controller builds it from the store, the simulator from its event queue; the scheduler
cannot tell the two apart, which is the point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import Node
from gpupool.domain.power_budget import PowerBudget
from gpupool.domain.projects import Project


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: int
    spec: JobSpec
    submitted_at: datetime
    restarts: int = 0
    owner: str = ""  # who submitted it: within a project, the jobs of whoever used less go first
    # GPU-seconds its earlier runs received (a job requeued after a preemption), and since when it
    # waits again (None: since it was submitted). The least-attained order (``plugins.las``) reads both.
    attained: float = 0.0
    waiting_since: datetime | None = None
    # Seconds of work it has left, known only to a simulator replaying a trace: the oracle bound
    # (``plugins.srtf``). The head never knows it and never sets it.
    oracle_remaining_s: float | None = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job whose workers hold resources (running, starting, or being killed)."""

    id: int
    spec: JobSpec
    placements: tuple[Placement, ...]
    started_at: datetime | None
    stopping: bool = False  # being cancelled or preempted: its resources are on their way back
    owner: str = ""
    attained: float = 0.0  # GPU-seconds its earlier runs received; this run's come from ``started_at``
    oracle_end: datetime | None = None  # when it will end, known only to a simulator (``plugins.srtf``)
    # The GPU power setting each worker launched with, as ``placements`` (issue 33); missing or
    # None: the GPU's default. What a power budget counts its GPUs at.
    power: tuple[PowerSetting | None, ...] = ()
    # An elastic job's workers being stopped by a shrink (issue 35), by number: their placements
    # hold resources until they exit, but they are on their way back and are not shrunk again.
    leaving: frozenset[int] = frozenset()
    # The first worker number its current run has not used (0: none beyond its placements'): a
    # grown worker takes a new number, never a stopped one's, whose run directory and exit the node
    # keeps. Set for elastic jobs only.
    next_worker: int = 0
    # False: an elastic job not to be grown now: one of its workers ended well (torchrun's agents
    # end together: it is finishing), or a worker of its run failed or could not be launched a
    # moment ago (no grow loop into a node that cannot take it). The store sets it; the simulator
    # never needs to.
    may_grow: bool = True

    @property
    def width(self) -> int:
        """Workers it runs on and keeps (an elastic job's changes; a gang's is its size)."""
        return len(self.placements) - len(self.leaving)

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
    # An image, as pending jobs name it -> the nodes a job already ran in it (issue 32): where its
    # unpacked root is likely cached. Between two nodes the placement scores alike, one of these wins.
    image_nodes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # The power budgets in force (issue 33); the default has none, and a start is never held for power.
    power: PowerBudget = field(default_factory=PowerBudget)

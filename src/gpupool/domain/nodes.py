"""Nodes and their GPUs as the scheduler and the API see them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class NodeState(enum.StrEnum):
    UP = "up"
    DRAINING = "draining"
    DRAINED = "drained"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical (or simulated) GPU as a probe reports it."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    simulated: bool
    healthy: bool = True
    nvlink_group: int | None = None
    # What its power limit may be set to (NVML's constraints) and its default, in watts (issue 33);
    # None where the GPU does not say (no permission, not supported).
    power_min_w: int | None = None
    power_max_w: int | None = None
    power_default_w: int | None = None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    state: NodeState
    address: str
    gpus: tuple[GpuInfo, ...]
    cpus: int
    memory_mib: int
    labels: dict[str, str] = field(default_factory=dict)
    # What the node enforces around each job: users, memory, cpus, devices, kill -> the mechanism,
    # or "none". Reported, not a scheduling fact: two nodes differing only here compare equal.
    isolation: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def schedulable(self) -> bool:
        return self.state is NodeState.UP

"""The probe interface every node runtime is given."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Protocol

from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import PowerRange
from gpupool.domain.telemetry import GpuSample


class PowerRefused(Exception):
    """The GPU would not take a power setting (NVML: not root, not supported); ``message`` is
    NVML's words, for the job's events: the job runs at whatever the GPU has, never a pretended cap."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class GpuProbe(Protocol):
    def gpus(self) -> list[GpuInfo]: ...

    def sample(self, node: str, busy: Collection[int], now: datetime) -> list[GpuSample]:
        """One reading of every GPU, stamped ``now`` and ``node``. ``busy``: the indices live
        workers hold (real GPUs ignore it; simulated ones are driven by it)."""
        ...

    def used_by(self, pids: Collection[int]) -> dict[int, int]:
        """GPU index -> MiB of its memory that the processes ``pids`` hold, for the GPUs they use:
        how a worker on a shared GPU is kept to its share."""
        ...

    def power_range(self, index: int) -> PowerRange | None:
        """What GPU ``index``'s power limit may be set to, and its default (None: it cannot say)."""
        ...

    def apply_power(self, index: int, setting: PowerSetting | None) -> None:
        """Set a power limit or lock the SM clocks of GPU ``index``; None restores its default
        (default limit, clocks unlocked). ``PowerRefused`` when the GPU will not."""
        ...

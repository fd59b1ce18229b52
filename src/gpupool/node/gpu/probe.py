"""The probe interface every node runtime is given."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Protocol

from gpupool.domain.nodes import GpuInfo
from gpupool.domain.telemetry import GpuSample


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

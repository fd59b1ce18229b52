"""The probe interface every node runtime is given."""

from __future__ import annotations

from typing import Protocol

from gpupool.domain.nodes import GpuInfo


class GpuProbe(Protocol):
    def gpus(self) -> list[GpuInfo]: ...

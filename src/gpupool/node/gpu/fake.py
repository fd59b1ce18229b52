"""Simulated GPUs for machines without any. Every GPU it reports says ``simulated=True`` and
its model name starts with "Simulated" so nobody mistakes a demo cluster for hardware."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpupool.domain.errors import InvalidInput
from gpupool.domain.nodes import GpuInfo

DEFAULT_MODEL = "Simulated-H100"
DEFAULT_MEMORY_MIB = 81559


@dataclass(frozen=True, slots=True)
class FakeProbe:
    node: str
    count: int
    model: str = DEFAULT_MODEL
    memory_mib: int = DEFAULT_MEMORY_MIB

    def gpus(self) -> list[GpuInfo]:
        return [
            GpuInfo(
                index=i,
                # Stable across restarts, distinct across nodes: derived from node name and index.
                uuid="GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpupool-sim/{self.node}/{i}")),
                model=self.model,
                memory_mib=self.memory_mib,
                simulated=True,
            )
            for i in range(self.count)
        ]


@dataclass(frozen=True, slots=True)
class JsonProbe:
    """GPUs described in a JSON file: ``[{"model": "A100", "memory_mib": 40960}, ...]``.

    For tests and demos of heterogeneous hardware; still simulated."""

    node: str
    path: Path

    def gpus(self) -> list[GpuInfo]:
        try:
            items = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"cannot read GPU description {self.path}: {exc}") from None
        return [
            GpuInfo(
                index=i,
                uuid=item.get("uuid") or "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpupool-sim/{self.node}/{i}")),
                model=str(item.get("model", DEFAULT_MODEL)),
                memory_mib=int(item.get("memory_mib", DEFAULT_MEMORY_MIB)),
                simulated=True,
                nvlink_group=item.get("nvlink_group"),
            )
            for i, item in enumerate(items)
        ]

"""Simulated GPUs for machines without any. Every GPU it reports says ``simulated=True`` and
its model name starts with "Simulated" so nobody mistakes a demo cluster for hardware; so does
every telemetry sample (see ``simulated.py`` for how the readings are made up). Their power limits
are kept in memory by the probe's sensors, as a real GPU keeps its own until it is reset."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from gpupool.domain.errors import InvalidInput
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import PowerRange
from gpupool.domain.telemetry import GpuSample
from gpupool.node.gpu.probe import PowerRefused
from gpupool.node.gpu.simulated import SimulatedSensors, limit_range

DEFAULT_MODEL = "Simulated-H100"
DEFAULT_MEMORY_MIB = 81559


@dataclass(frozen=True, slots=True)
class FakeProbe:
    node: str
    count: int
    model: str = DEFAULT_MODEL
    memory_mib: int = DEFAULT_MEMORY_MIB
    sensors: SimulatedSensors = field(default_factory=SimulatedSensors, compare=False, repr=False)

    def gpus(self) -> list[GpuInfo]:
        return [
            _with_power(GpuInfo(i, _uuid(self.node, i), self.model, self.memory_mib, True)) for i in range(self.count)
        ]

    def sample(self, node: str, busy: Collection[int], now: datetime) -> list[GpuSample]:
        return self.sensors.read(node, self.gpus(), busy, now)

    def used_by(self, pids: Collection[int]) -> dict[int, int]:
        return simulated_memory_use(pids)

    def power_range(self, index: int) -> PowerRange | None:
        return simulated_power_range(self.gpus(), index)

    def apply_power(self, index: int, setting: PowerSetting | None) -> None:
        apply_simulated_power(self.sensors, self.gpus(), index, setting)


@dataclass(frozen=True, slots=True)
class ListedProbe:
    """GPUs as a hardware description lists them; still simulated."""

    node: str
    listed: tuple[GpuInfo, ...]
    sensors: SimulatedSensors = field(default_factory=SimulatedSensors, compare=False, repr=False)

    def gpus(self) -> list[GpuInfo]:
        return list(self.listed)

    def sample(self, node: str, busy: Collection[int], now: datetime) -> list[GpuSample]:
        return self.sensors.read(node, self.listed, busy, now)

    def used_by(self, pids: Collection[int]) -> dict[int, int]:
        return simulated_memory_use(pids)

    def power_range(self, index: int) -> PowerRange | None:
        return simulated_power_range(self.listed, index)

    def apply_power(self, index: int, setting: PowerSetting | None) -> None:
        apply_simulated_power(self.sensors, self.listed, index, setting)


def _with_power(gpu: GpuInfo) -> GpuInfo:
    power = limit_range(gpu.model)
    return replace(gpu, power_min_w=power.min_w, power_max_w=power.max_w, power_default_w=power.default_w)


def simulated_power_range(gpus: Sequence[GpuInfo], index: int) -> PowerRange | None:
    found = next((g for g in gpus if g.index == index), None)
    return None if found is None else limit_range(found.model)


def apply_simulated_power(
    sensors: SimulatedSensors, gpus: Sequence[GpuInfo], index: int, setting: PowerSetting | None
) -> None:
    """What NVML does with a setting, on a simulated GPU: a limit outside its range is refused."""
    gpu = next((g for g in gpus if g.index == index), None)
    if gpu is None:
        raise PowerRefused(f"NVML: Invalid Argument (no GPU {index})")
    power = limit_range(gpu.model)
    if setting is not None and setting.kind == "limit" and not power.min_w <= setting.value <= power.max_w:
        raise PowerRefused(f"NVML: Invalid Argument ({setting.value} W is outside {power.min_w}-{power.max_w} W)")
    sensors.set_power(gpu.uuid, setting)


SIMULATED_USE_ENV = "GPUPOOL_SIMULATED_GPU_MEMORY_MIB"


def simulated_memory_use(pids: Collection[int]) -> dict[int, int]:
    """What processes hold on simulated GPUs, as they declare it: a process started with
    ``GPUPOOL_SIMULATED_GPU_MEMORY_MIB=N`` in its environment holds N MiB on each GPU of its
    ``CUDA_VISIBLE_DEVICES``, as a CUDA process would after allocating. A stand-in for NVML's
    per-process query, so the GPU memory watch is tested end to end where there is no GPU."""
    used: dict[int, int] = {}
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        env = dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
        try:
            mib = int(env.get(SIMULATED_USE_ENV.encode(), b"0"))
            gpus = [int(g) for g in env.get(b"CUDA_VISIBLE_DEVICES", b"").split(b",") if g.strip()]
        except ValueError:
            continue
        for gpu in gpus if mib > 0 else ():
            used[gpu] = used.get(gpu, 0) + mib
    return used


def load_hardware(path: Path) -> list[ListedProbe]:
    """Read a simulated cluster from JSON, for heterogeneous demos and tests::

    {"nodes": [{"name": "a100-1", "gpus": [{"model": "A100", "memory_mib": 40960,
                                             "nvlink_group": 0}, ...]}, ...]}
    """
    try:
        data = json.loads(path.read_text())
        nodes = data["nodes"]
        probes = []
        for spec in nodes:
            name = str(spec["name"])
            gpus = tuple(
                _with_power(
                    GpuInfo(
                        index=i,
                        uuid=str(g.get("uuid") or _uuid(name, i)),
                        model=str(g.get("model", DEFAULT_MODEL)),
                        memory_mib=int(g.get("memory_mib", DEFAULT_MEMORY_MIB)),
                        simulated=True,
                        nvlink_group=g.get("nvlink_group"),
                    )
                )
                for i, g in enumerate(spec.get("gpus", []))
            )
            probes.append(ListedProbe(name, gpus))
    except OSError as exc:
        raise InvalidInput(f"cannot read the hardware description {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"the hardware description {path} is malformed: {type(exc).__name__} {exc}") from None
    if not probes or len({p.node for p in probes}) != len(probes):
        raise InvalidInput(f"the hardware description {path} needs at least one node and distinct node names")
    return probes


def _uuid(node: str, index: int) -> str:
    # Stable across restarts, distinct across nodes: derived from node name and index.
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpupool-sim/{node}/{index}"))

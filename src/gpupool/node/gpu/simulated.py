"""Plausible telemetry for simulated GPUs, driven by which of them jobs hold.

A GPU a live worker holds runs at 60-95 % utilisation with 40-80 % of its memory used; an idle
one sits at 0 % and idle power. Temperature follows utilisation, power lies between the model's
idle draw and its TDP, and the energy counter integrates power over time (so it only grows).
The "noise" is a hash of (seed, GPU, time slot), interpolated between slots: the same seed, GPUs,
busy sets and times give the same readings, so tests can check values, and the curves move
smoothly instead of jumping every sample.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Sequence
from datetime import datetime

from gpupool.domain.nodes import GpuInfo
from gpupool.domain.telemetry import GpuSample

BUSY_UTIL_PCT = (60.0, 95.0)
BUSY_MEMORY_FRACTION = (0.40, 0.80)
AMBIENT_C = 30.0
# (TDP, idle draw) in watts by model name, the first match wins.
_POWER_W = (("H200", 700.0, 75.0), ("H100", 700.0, 70.0), ("A100", 400.0, 55.0), ("V100", 300.0, 40.0))
_DEFAULT_POWER_W = (300.0, 35.0)
_UTIL_SLOT_S = 10.0  # utilisation wanders on this time scale
_MEMORY_SLOT_S = 300.0  # memory use changes slowly


class SimulatedSensors:
    """Readings for simulated GPUs. Holds only each GPU's energy counter (and when it last read
    it): everything else is a pure function of the seed, the GPU, whether it is busy, and time."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._lock = threading.Lock()
        self._meters: dict[str, tuple[datetime, float, float]] = {}  # uuid -> (time, power W, energy J)

    def read(self, node: str, gpus: Sequence[GpuInfo], busy: Collection[int], now: datetime) -> list[GpuSample]:
        with self._lock:
            return [self._read_one(node, gpu, gpu.index in busy, now) for gpu in gpus]

    def _read_one(self, node: str, gpu: GpuInfo, busy: bool, now: datetime) -> GpuSample:
        t = now.timestamp()
        tdp_w, idle_w = power_range(gpu.model)
        if busy:
            low, high = BUSY_UTIL_PCT
            util = low + (high - low) * self._smooth(gpu.uuid, "util", t, _UTIL_SLOT_S)
            low, high = BUSY_MEMORY_FRACTION
            used = int(gpu.memory_mib * (low + (high - low) * self._smooth(gpu.uuid, "mem", t, _MEMORY_SLOT_S)))
        else:
            util, used = 0.0, 0
        jitter = self._smooth(gpu.uuid, "jitter", t, _UTIL_SLOT_S)
        temperature = AMBIENT_C + 0.5 * util + 2.0 * jitter
        power = idle_w * (0.95 + 0.1 * jitter) + (tdp_w - idle_w) * util / 100.0 * (0.85 + 0.15 * jitter)
        energy = self._integrate(gpu.uuid, now, power)
        return GpuSample(
            node=node,
            index=gpu.index,
            uuid=gpu.uuid,
            time=now,
            memory_used_mib=used,
            memory_total_mib=gpu.memory_mib,
            simulated=True,
            utilization_pct=round(util, 1),
            temperature_c=round(temperature, 1),
            power_w=round(power, 1),
            energy_j=round(energy, 3),
            ecc_errors=0,
            xid_errors=0,
        )

    def _integrate(self, uuid: str, now: datetime, power_w: float) -> float:
        """Trapezoids between readings; a clock that steps back adds nothing."""
        last = self._meters.get(uuid)
        energy = 0.0
        if last is not None:
            then, last_power, energy = last
            elapsed = max(0.0, (now - then).total_seconds())
            energy += (last_power + power_w) / 2.0 * elapsed
        self._meters[uuid] = (max(now, last[0]) if last else now, power_w, energy)
        return energy

    def _smooth(self, uuid: str, what: str, t: float, slot_s: float) -> float:
        """A value in [0, 1) that moves linearly from one slot's hash to the next's."""
        slot, frac = divmod(t / slot_s, 1.0)
        a, b = self._hash(uuid, what, int(slot)), self._hash(uuid, what, int(slot) + 1)
        return a + (b - a) * frac

    def _hash(self, uuid: str, what: str, slot: int) -> float:
        digest = hashlib.blake2b(f"{self.seed}/{uuid}/{what}/{slot}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64


def power_range(model: str) -> tuple[float, float]:
    """(TDP, idle draw) in watts of a GPU model, by its name."""
    for name, tdp_w, idle_w in _POWER_W:
        if name in model.upper():
            return tdp_w, idle_w
    return _DEFAULT_POWER_W

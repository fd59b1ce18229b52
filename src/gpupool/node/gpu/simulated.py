"""Plausible telemetry for simulated GPUs, driven by which of them jobs hold.

A GPU a live worker holds runs at 60-95 % utilisation with 40-80 % of its memory used; an idle
one sits at 0 % and idle power. Temperature follows utilisation, power lies between the model's
idle draw and its TDP, and the energy counter integrates power over time (so it only grows).
The "noise" is a hash of (seed, GPU, time slot), interpolated between slots: the same seed, GPUs,
busy sets and times give the same readings, so tests can check values, and the curves move
smoothly instead of jumping every sample.

Power (issue 33): a simulated GPU's limit may be set between about 2/7 of its TDP and its TDP
(the default), as an H100's 200-700 W; the sensors keep each GPU's setting in memory. Under a
limit a busy GPU draws at most the limit and runs as fast as the H100's measured curve says
(``domain.power.capped_speed``), its utilisation scaled by that speed; a clock lock draws and runs
as the model's default curve measured at that clock.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Sequence
from datetime import datetime

from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import PowerRange, capped_speed, default_curve, default_limit_w, family_range, idle_w
from gpupool.domain.telemetry import GpuSample

BUSY_UTIL_PCT = (60.0, 95.0)
BUSY_MEMORY_FRACTION = (0.40, 0.80)
AMBIENT_C = 30.0
# (TDP, idle draw) in watts by model name, the first match wins.
_UTIL_SLOT_S = 10.0  # utilisation wanders on this time scale
_MEMORY_SLOT_S = 300.0  # memory use changes slowly


class SimulatedSensors:
    """Readings for simulated GPUs. Holds only each GPU's energy counter (and when it last read
    it): everything else is a pure function of the seed, the GPU, whether it is busy, and time."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._lock = threading.Lock()
        self._meters: dict[str, tuple[datetime, float, float]] = {}  # uuid -> (time, power W, energy J)
        self._power: dict[str, PowerSetting] = {}  # uuid -> its power setting; absent: the default
        self._full: set[str] = set()  # GPUs running compute-bound work (calibration): full demand, no noise

    def set_power(self, uuid: str, setting: PowerSetting | None) -> None:
        with self._lock:
            if setting is None:
                self._power.pop(uuid, None)
            else:
                self._power[uuid] = setting

    def full_load(self, uuid: str, on: bool) -> None:
        """Whether a GPU runs compute-bound work, as calibration's kernel is: it then asks for all
        its model's power, which a limit caps (what a real GPU under a matmul loop does)."""
        with self._lock:
            (self._full.add if on else self._full.discard)(uuid)

    def power_setting(self, uuid: str) -> PowerSetting | None:
        with self._lock:
            return self._power.get(uuid)

    def read(self, node: str, gpus: Sequence[GpuInfo], busy: Collection[int], now: datetime) -> list[GpuSample]:
        with self._lock:
            return [self._read_one(node, gpu, gpu.index in busy, now) for gpu in gpus]

    def _read_one(self, node: str, gpu: GpuInfo, busy: bool, now: datetime) -> GpuSample:
        t = now.timestamp()
        tdp_w, idle = power_range(gpu.model)
        setting = self._power.get(gpu.uuid)
        cap_w, speed = under(setting, gpu.model, tdp_w)
        limit_w = float(setting.value) if setting is not None and setting.kind == "limit" else tdp_w  # NVML's enforced
        full = gpu.uuid in self._full  # calibration's work: busy whoever reads it (the telemetry too)
        busy = busy or full
        demand = 0.0  # the part of its model's power the work asks for; a limit caps what it gets
        if busy:
            low, high = BUSY_UTIL_PCT
            demand = 1.0 if full else (low + (high - low) * self._smooth(gpu.uuid, "util", t, _UTIL_SLOT_S)) / 100
            util = 100.0 * demand * speed  # under a cap the same work takes longer: the SMs are less busy
            low, high = BUSY_MEMORY_FRACTION
            used = int(gpu.memory_mib * (low + (high - low) * self._smooth(gpu.uuid, "mem", t, _MEMORY_SLOT_S)))
        else:
            util, used = 0.0, 0
        jitter = 0.5 if full else self._smooth(gpu.uuid, "jitter", t, _UTIL_SLOT_S)
        temperature = AMBIENT_C + 0.5 * util + 2.0 * jitter
        wanted = (tdp_w - idle) * demand * (1.0 if full else 0.85 + 0.15 * jitter)
        power = min(idle * (0.95 + 0.1 * jitter) + wanted, cap_w)
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
            power_limit_w=limit_w,
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
    """(TDP, idle draw) in watts of a GPU model, by its name (``domain.power``'s family table)."""
    return float(default_limit_w(model)), idle_w(model)


def limit_range(model: str) -> PowerRange:
    """What a simulated GPU's power limit may be set to: its family's range (an H100's 200-700 W)."""
    return family_range(model)


def under(setting: PowerSetting | None, model: str, tdp_w: float) -> tuple[float, float]:
    """(the most a GPU draws, its speed relative to the default) under ``setting``: a limit caps
    the draw and slows it as the measured curve does; a clock lock draws and runs as the model's
    default curve says at the nearest measured clock (the default where none was measured)."""
    if setting is None:
        return tdp_w, 1.0
    if setting.kind == "limit":
        return float(setting.value), capped_speed(setting.value, tdp_w)
    clocks = [p for p in default_curve(model, round(tdp_w)).points if p.setting.kind == "clocks"]
    if not clocks:
        return tdp_w, 1.0
    point = min(clocks, key=lambda p: abs(p.setting.value - setting.value))
    return point.watts, point.speed

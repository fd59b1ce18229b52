"""Measure a GPU model's power curve on this node (issue 33, ``gpupool node calibrate-power``).

For each GPU model of the node, one GPU no job holds runs compute-bound work at a few settings (the
default, power limits at 85/70/55/40 % of it, and on Hopper SM clocks locked at 1200 and 900 MHz),
each for an equal part of a bounded time, while the GPU's energy counter is read before and after:
speed and energy per unit of work at each setting, relative to the default, is the curve the head
stores and ``--gpu-power efficient`` follows. The GPU's default is restored at the end, also when
something fails on the way.

The work: on a real GPU, a subprocess multiplying bf16 8192x8192 matrices with torch, pinned to that
GPU, counting the TFLOP it did; on a simulated GPU, a model whose rate under a limit is
``domain.power.capped_speed`` (the measured H100's shape) while its energy is the simulated
sensors' counter, so the curve comes out of the same probe a real one does.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from gpupool.clock import Clock
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import PowerRange, capped_speed, default_curve, family_range
from gpupool.domain.telemetry import GpuSample

log = logging.getLogger("gpupool.node")

DEFAULT_BOUND_S = 60.0  # per GPU model
LIMIT_FRACTIONS = (0.85, 0.70, 0.55, 0.40)
HOPPER_CLOCKS_MHZ = (1200, 900)
SETTLE = 0.25  # of each setting's share: the GPU settles under it before the window is read
START_SHARE = 0.4  # of the bound: the most a real GPU's work may take to start (torch, CUDA)


@runtime_checkable
class PowerProbe(Protocol):
    """What calibration needs of a node's GPU probe (``node/gpu``: nvml, fake, simulated)."""

    def gpus(self) -> list[GpuInfo]: ...

    def sample(self, node: str, busy: Collection[int], now: datetime) -> list[GpuSample]: ...

    def apply_power(self, index: int, setting: PowerSetting | None) -> None:
        """Set (None: restore the default); raises ``node.gpu.probe.PowerRefused`` when refused."""
        ...

    def power_range(self, index: int) -> PowerRange | None: ...


class Work(Protocol):
    """Compute-bound work on one GPU, counted in ``unit``s."""

    unit: str

    def start(self, within_s: float) -> None:
        """Returns once it runs; raises RuntimeError with a sentence when it cannot."""
        ...

    def applied(self, setting: PowerSetting | None) -> None: ...

    def done(self) -> float:
        """Units done so far."""
        ...

    def close(self) -> None: ...


class SimulatedWork:
    """A simulated GPU's work: its rate follows the setting (the H100's measured shape)."""

    unit = "work"

    def __init__(self, gpu: GpuInfo, default_w: int, clock: Clock, sensors: Any = None) -> None:
        self._clock, self._gpu, self._sensors = clock, gpu, sensors  # sensors: the simulated GPUs' own
        self._default_w = default_w
        self._clocks = {p.setting.value: p.speed for p in default_curve(gpu.model, default_w).points}
        self._rate, self._total, self._since = 1.0, 0.0, clock.now()

    def start(self, within_s: float) -> None:
        self._since = self._clock.now()
        if self._sensors is not None:  # compute-bound, as the real kernel: it asks for the GPU's full power
            self._sensors.full_load(self._gpu.uuid, True)

    def applied(self, setting: PowerSetting | None) -> None:
        self._total = self.done()
        self._since = self._clock.now()
        if setting is None:
            self._rate = 1.0
        elif setting.kind == "limit":
            self._rate = capped_speed(setting.value, self._default_w)
        else:
            self._rate = self._clocks.get(setting.value, 1.0)

    def done(self) -> float:
        return self._total + self._rate * (self._clock.now() - self._since).total_seconds()

    def close(self) -> None:
        if self._sensors is not None:
            self._sensors.full_load(self._gpu.uuid, False)


_MATMUL = """
import sys, torch
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
done = 0.0
while True:
    for _ in range(10):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    done += 10 * 2 * n**3 / 1e12
    print(f"{done:.3f}", flush=True)
"""


class MatmulWork:
    """A real GPU's work: a torch bf16 matrix-product loop in a subprocess pinned to the GPU,
    printing the TFLOP it did so far after every ten products."""

    unit = "TFLOP"

    def __init__(self, gpu: GpuInfo, python: str = sys.executable) -> None:
        self._gpu, self._python = gpu, python
        self._done = 0.0
        self._process: subprocess.Popen[str] | None = None
        self._ready = threading.Event()

    def start(self, within_s: float) -> None:
        env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": self._gpu.uuid}
        self._process = subprocess.Popen(
            [self._python, "-c", _MATMUL], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(within_s):
            why = "it did not start" if self._process.poll() is None else self._stderr_tail()
            self.close()
            raise RuntimeError(
                f"the torch matmul loop on GPU {self._gpu.index} did not run within {within_s:.0f}s: {why}"
            )

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                self._done = float(line)
            except ValueError:
                continue
            self._ready.set()

    def _stderr_tail(self) -> str:
        assert self._process is not None and self._process.stderr is not None
        lines = self._process.stderr.read().strip().splitlines()
        return lines[-1][:200] if lines else f"it exited with {self._process.returncode}"

    def applied(self, setting: PowerSetting | None) -> None:
        pass

    def done(self) -> float:
        return self._done

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)


def sweep(model: str, power: PowerRange) -> list[PowerSetting | None]:
    """The settings measured: the default first, then limits, then (Hopper) clock locks."""
    limits = sorted({max(power.min_w, round(power.default_w * f)) for f in LIMIT_FRACTIONS}, reverse=True)
    settings: list[PowerSetting | None] = [None]
    settings += [PowerSetting("limit", w) for w in limits if w < power.default_w]
    if any(name in model.upper() for name in ("H100", "H200")):
        settings += [PowerSetting("clocks", mhz) for mhz in HOPPER_CLOCKS_MHZ]
    return settings


def calibrate(
    probe: object,
    node: str,
    busy: Collection[int],
    bound_s: float,
    clock: Clock,
    sleep: Callable[[float], None] = time.sleep,
    work_for: Callable[[GpuInfo, int], Work] | None = None,
) -> list[dict[str, Any]]:
    """One result per GPU model of the node: its points (the default first), or why not."""
    gpus = probe.gpus() if isinstance(probe, PowerProbe) else []
    models = sorted({g.model for g in gpus})
    if not isinstance(probe, PowerProbe):
        return [{"node": node, "model": None, "refused": f"node {node}'s GPU probe cannot set power limits"}]
    results = []
    for model in models:
        free = [g for g in gpus if g.model == model and g.index not in busy]
        if not free:
            why = f"jobs hold every {model} on {node}; calibrate it when one is free (or drain one GPU)"
            results.append({"node": node, "model": model, "refused": why})
            continue
        gpu = free[0]
        power = probe.power_range(gpu.index) or family_range(model)
        work = (work_for or _work_for(clock, getattr(probe, "sensors", None)))(gpu, power.default_w)
        results.append(_one(probe, node, gpu, power, work, bound_s, clock, sleep))
    return results


def _work_for(clock: Clock, sensors: Any) -> Callable[[GpuInfo, int], Work]:
    def make(gpu: GpuInfo, default_w: int) -> Work:
        return SimulatedWork(gpu, default_w, clock, sensors) if gpu.simulated else MatmulWork(gpu)

    return make


def _one(
    probe: PowerProbe,
    node: str,
    gpu: GpuInfo,
    power: PowerRange,
    work: Work,
    bound_s: float,
    clock: Clock,
    sleep: Callable[[float], None],
) -> dict[str, Any]:
    began = clock.now()
    settings = sweep(gpu.model, power)
    result: dict[str, Any] = {
        "node": node,
        "model": gpu.model,
        "gpu": gpu.index,
        "simulated": gpu.simulated,
        "unit": work.unit,
        "default_w": power.default_w,
        "bound_s": bound_s,
        "refused": None,
        "skipped": [],
        "points": [],
    }
    raw: list[tuple[PowerSetting | None, float, float]] = []  # (setting, units/s, J/s)
    try:
        work.start(bound_s * START_SHARE)
        share = max(0.0, bound_s - (clock.now() - began).total_seconds()) / len(settings)
        for setting in settings:
            try:
                probe.apply_power(gpu.index, setting)
            except Exception as exc:  # PowerRefused: not root, not supported
                if setting is None:
                    raise
                result["skipped"].append(f"{setting.text}: {exc}")
                continue
            work.applied(setting)
            raw.append((setting, *_measure(probe, node, gpu.index, work, share, clock, sleep)))
    except Exception as exc:
        result["refused"] = f"calibrating the {gpu.model} (GPU {gpu.index}) on {node} failed: {exc}"
    finally:
        try:
            probe.apply_power(gpu.index, None)
        except Exception:
            log.exception("restoring GPU %s's default power after calibration failed", gpu.index)
        work.close()
    result["elapsed_s"] = round((clock.now() - began).total_seconds(), 2)
    result["points"] = _relative(raw, power.default_w) if result["refused"] is None else []
    return result


def _measure(
    probe: PowerProbe,
    node: str,
    index: int,
    work: Work,
    share_s: float,
    clock: Clock,
    sleep: Callable[[float], None],
) -> tuple[float, float]:
    """(units of work per second, joules per second) over the settled part of ``share_s``."""
    sleep(share_s * SETTLE)
    w0, e0, t0 = work.done(), _energy(probe, node, index, clock), clock.now()
    sleep(share_s * (1 - SETTLE))
    w1, e1, t1 = work.done(), _energy(probe, node, index, clock), clock.now()
    seconds = (t1 - t0).total_seconds()
    if seconds <= 0 or w1 <= w0:
        raise RuntimeError("no work was counted in the window (a bound too short?)")
    return (w1 - w0) / seconds, (e1 - e0) / seconds


def _energy(probe: PowerProbe, node: str, index: int, clock: Clock) -> float:
    for sample in probe.sample(node, frozenset({index}), clock.now()):
        if sample.index == index:
            if sample.energy_j is None:
                raise RuntimeError(f"GPU {index} has no energy counter (before Volta, or not allowed)")
            return sample.energy_j
    raise RuntimeError(f"GPU {index} gave no reading")


def _relative(raw: Sequence[tuple[PowerSetting | None, float, float]], default_w: int) -> list[dict[str, Any]]:
    """Each point relative to the default's (speed 1, energy 1); the default named as its limit."""
    if not raw or raw[0][0] is not None:
        return []
    _, base_rate, base_watts = raw[0]
    base_energy = base_watts / base_rate
    points = []
    for setting, rate, watts in raw:
        shown = setting or PowerSetting("limit", default_w)
        points.append(
            {
                "kind": shown.kind,
                "value": shown.value,
                "speed": round(rate / base_rate, 4),
                "energy": round((watts / rate) / base_energy, 4),
                "watts": round(watts, 1),
                "rate": round(rate, 3),
            }
        )
    return points

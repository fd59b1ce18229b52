"""Calibration on a simulated GPU model (issue 33): the sweep stays within its bound, restores the
default, and its efficient point saves energy per unit of work against max. The probe here is a
small one of the test's own that keeps each GPU's setting and draws what it allows, on a virtual
clock (the node's probes get the same calls: ``apply_power``, ``power_range``, ``sample``)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import pytest

from gpupool.clock import FakeClock
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import PowerCurve, PowerPoint, PowerRange, default_curve
from gpupool.domain.telemetry import GpuSample
from gpupool.node.gpu.fake import FakeProbe
from gpupool.node.power_calibrate import PowerProbe, calibrate, sweep
from gpupool.usecases.power import with_efficient


class PowerRefused(Exception):
    pass


class CappedProbe:
    """Simulated GPUs of one model that draw their limit under work (or, with clocks locked, what
    the H100 drew there), and whose energy counter integrates it on the test's clock."""

    def __init__(self, clock: FakeClock, model: str = "Simulated-H100", count: int = 2, refuse: bool = False) -> None:
        self.clock, self.model, self.count, self.refuse = clock, model, count, refuse
        self.settings: dict[int, PowerSetting | None] = {}
        self.applied: list[tuple[int, PowerSetting | None]] = []
        self._meter: dict[int, tuple[datetime, float]] = {}
        self._clock_watts = {p.setting.value: p.watts for p in default_curve(model, 700).points}

    def gpus(self) -> list[GpuInfo]:
        return [GpuInfo(i, f"GPU-{i}", self.model, 81559, True) for i in range(self.count)]

    def power_range(self, index: int) -> PowerRange | None:
        return PowerRange(200, 700, 700)

    def apply_power(self, index: int, setting: PowerSetting | None) -> None:
        if self.refuse and setting is not None:
            raise PowerRefused("not root: NVML refused")
        self._energy(index)  # what it drew until now, at the old setting
        self.settings[index] = setting
        self.applied.append((index, setting))

    def _watts(self, index: int) -> float:
        setting = self.settings.get(index)
        if setting is None:
            return 700.0
        return float(setting.value) if setting.kind == "limit" else self._clock_watts[setting.value]

    def _energy(self, index: int) -> float:
        now = self.clock.now()
        then, joules = self._meter.get(index, (now, 0.0))
        joules += self._watts(index) * (now - then).total_seconds()
        self._meter[index] = (now, joules)
        return joules

    def sample(self, node: str, busy: Collection[int], now: datetime) -> list[GpuSample]:
        return [
            GpuSample(node, i, f"GPU-{i}", now, 0, 81559, True, power_w=self._watts(i), energy_j=self._energy(i))
            for i in range(self.count)
        ]


def test_the_probe_of_this_test_is_what_calibration_asks_for() -> None:
    assert isinstance(CappedProbe(FakeClock()), PowerProbe)


def test_the_sweep_has_the_default_limits_and_on_hopper_clock_locks() -> None:
    hopper = sweep("H100", PowerRange(200, 700, 700))
    assert hopper[0] is None
    assert [s.value for s in hopper[1:] if s is not None] == [595, 490, 385, 280, 1200, 900]
    assert all(s is None or s.kind == "limit" for s in sweep("A100", PowerRange(150, 400, 400)))
    assert sweep("V100", PowerRange(250, 300, 300))[1:] == [PowerSetting("limit", 255), PowerSetting("limit", 250)]


def test_a_simulated_model_is_calibrated_within_its_bound_and_efficient_saves_energy() -> None:
    clock = FakeClock()
    probe = CappedProbe(clock)
    (result,) = calibrate(probe, "node-1", busy={0}, bound_s=20.0, clock=clock, sleep=clock.advance)
    assert result["refused"] is None and result["gpu"] == 1  # GPU 0 is held by a job
    assert result["elapsed_s"] <= 20.0
    assert probe.applied[-1] == (1, None) and probe.settings[1] is None  # the default again
    points = result["points"]
    assert (points[0]["kind"], points[0]["value"], points[0]["speed"], points[0]["energy"]) == ("limit", 700, 1, 1)
    curve = PowerCurve(
        "Simulated-H100",
        tuple(PowerPoint(PowerSetting(p["kind"], p["value"]), p["speed"], p["energy"], p["watts"]) for p in points),
        calibrated=True,
    )
    best = curve.efficient(0.2)
    assert best.speed >= 0.8 and best.energy < 0.9  # the H100's shape: ~14 % less energy per unit of work
    assert best.setting != PowerSetting("limit", 700)


def test_every_gpu_held_is_refused_and_a_refused_setting_is_skipped_not_pretended() -> None:
    clock = FakeClock()
    (held,) = calibrate(CappedProbe(clock), "node-1", busy={0, 1}, bound_s=10.0, clock=clock, sleep=clock.advance)
    assert "jobs hold every Simulated-H100 on node-1" in held["refused"]
    probe = CappedProbe(clock, refuse=True)
    (result,) = calibrate(probe, "node-1", busy=(), bound_s=10.0, clock=clock, sleep=clock.advance)
    assert [p["value"] for p in result["points"]] == [700]  # only the default was measured
    assert result["skipped"] and "not root" in result["skipped"][0]


def test_a_probe_that_cannot_set_power_is_said() -> None:
    clock = FakeClock()
    (result,) = calibrate(object(), "node-1", busy=(), bound_s=10.0, clock=clock, sleep=clock.advance)
    assert "cannot set power" in result["refused"]


def test_the_nodes_own_simulated_gpus_calibrate_to_the_measured_h100_shape() -> None:
    """The node's simulated probe, not the test's: under calibration's compute-bound work a GPU
    asks for its full power and a limit caps it, so the curve is the H100's as measured here."""
    clock = FakeClock()
    probe = FakeProbe("node-1", 2)
    (result,) = calibrate(probe, "node-1", busy=(), bound_s=30.0, clock=clock, sleep=clock.advance)
    energy = {(p["kind"], p["value"]): p["energy"] for p in result["points"]}
    assert energy[("limit", 490)] == pytest.approx(0.864, abs=0.02)  # MACHINE-FACTS: 500 W, -14 %
    assert energy[("clocks", 900)] == pytest.approx(0.812, abs=0.03)
    efficient = next(p for p in with_efficient(result)["points"] if p["efficient"])
    assert (efficient["kind"], efficient["value"]) == ("limit", 490)
    assert probe.power_range(0) is not None and probe.sensors.power_setting(probe.gpus()[0].uuid) is None
    idle = probe.sample("node-1", (), clock.now())[0]
    assert idle.power_w is not None and idle.power_w < 100  # the full load ended with the sweep

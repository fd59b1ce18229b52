"""GPU probes read telemetry: the fake one makes up plausible, reproducible values driven by which
GPUs jobs hold; the NVML one reads a (fake) NVML and leaves out what the GPU does not offer."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpupool.clock import FakeClock
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.telemetry import GpuSample
from gpupool.executors.local import LocalExecutor
from gpupool.node.gpu.fake import FakeProbe, ListedProbe
from gpupool.node.gpu.nvml import NvmlProbe
from gpupool.node.gpu.simulated import SimulatedSensors, power_range
from gpupool.node.runtime import NodeRuntime
from tests.support.nvml import (
    Event,
    FakeGpu,
    FakeNvml,
    NVMLError,
)

T0 = datetime(2026, 3, 14, 15, 9, 0, tzinfo=UTC)


def run(probe: FakeProbe, busy: set[int], seconds: int, every: int = 5) -> list[list[GpuSample]]:
    """Read every ``every`` seconds for ``seconds``, from T0."""
    return [probe.sample("node-1", busy, T0 + timedelta(seconds=t)) for t in range(0, seconds + 1, every)]


def test_held_gpus_look_busy_and_the_others_idle() -> None:
    readings = run(FakeProbe("node-1", 4), busy={1, 2}, seconds=600)
    tdp, idle = power_range("Simulated-H100")
    for reading in readings:
        assert [s.index for s in reading] == [0, 1, 2, 3]
        for s in reading:
            assert s.simulated and s.node == "node-1" and s.memory_total_mib == 81559
            assert (s.ecc_errors, s.xid_errors) == (0, 0)
            assert s.utilization_pct is not None and s.power_w is not None and s.temperature_c is not None
            if s.index in (1, 2):
                assert 60 <= s.utilization_pct <= 95
                assert 0.4 * 81559 <= s.memory_used_mib <= 0.8 * 81559
                assert idle < s.power_w <= tdp
                assert 55 <= s.temperature_c <= 80
            else:
                assert (s.utilization_pct, s.memory_used_mib) == (0.0, 0)
                assert abs(s.power_w - idle) <= 0.05 * idle + 0.1
                assert 29 <= s.temperature_c <= 33
    busy_util = [r[1].utilization_pct for r in readings]
    assert len(set(busy_util)) > 50, "utilisation wanders"
    steps = [abs(a - b) for a, b in itertools.pairwise(busy_util) if a is not None and b is not None]
    assert max(steps) <= 18, "and moves smoothly: at most half the range in 5 s (slots of 10 s)"


def test_temperature_and_power_rise_with_utilisation() -> None:
    reading = run(FakeProbe("node-1", 8), busy={0, 1, 2, 3}, seconds=0)[0]
    idle = [s for s in reading if s.index >= 4]
    busy = [s for s in reading if s.index < 4]
    assert min(s.temperature_c or 0 for s in busy) > max(s.temperature_c or 0 for s in idle)
    assert min(s.power_w or 0 for s in busy) > 2 * max(s.power_w or 0 for s in idle)
    for s in busy:  # half a degree per percent above the ambient 30 C, and up to 2 C of jitter
        assert 30 + 0.5 * (s.utilization_pct or 0) <= (s.temperature_c or 0) <= 32.05 + 0.5 * (s.utilization_pct or 0)


def test_the_same_seed_busy_sets_and_times_give_the_same_readings() -> None:
    a = run(FakeProbe("node-1", 2, sensors=SimulatedSensors(seed=7)), busy={0}, seconds=120)
    b = run(FakeProbe("node-1", 2, sensors=SimulatedSensors(seed=7)), busy={0}, seconds=120)
    c = run(FakeProbe("node-1", 2, sensors=SimulatedSensors(seed=8)), busy={0}, seconds=120)
    assert a == b
    assert [s.utilization_pct for r in a for s in r] != [s.utilization_pct for r in c for s in r]


def test_the_energy_counter_integrates_power_and_never_goes_back() -> None:
    probe = FakeProbe("node-1", 2)
    readings = run(probe, busy={0}, seconds=300)
    for index in (0, 1):
        energy = [r[index].energy_j or 0.0 for r in readings]
        assert energy[0] == 0.0
        assert all(later >= earlier for earlier, later in itertools.pairwise(energy))
        power = [r[index].power_w or 0.0 for r in readings]
        trapezoids = sum((p + q) / 2 * 5 for p, q in itertools.pairwise(power))
        assert energy[-1] == pytest.approx(trapezoids, rel=1e-3)
    assert (readings[-1][0].energy_j or 0) > 4 * (readings[-1][1].energy_j or 0), "busy burns more"
    back = probe.sample("node-1", {0}, T0)  # a clock that steps back adds nothing
    assert back[0].energy_j == readings[-1][0].energy_j


def test_a_listed_hardware_probe_samples_its_own_gpus() -> None:
    gpus = (GpuInfo(0, "GPU-a", "A100", 40960, True), GpuInfo(1, "GPU-b", "A100", 40960, True))
    reading = ListedProbe("a100-1", gpus).sample("a100-1", {1}, T0)
    assert [(s.uuid, s.memory_total_mib, s.simulated) for s in reading] == [
        ("GPU-a", 40960, True),
        ("GPU-b", 40960, True),
    ]
    assert reading[0].utilization_pct == 0 and (reading[1].utilization_pct or 0) >= 60
    assert (reading[1].power_w or 0) <= power_range("A100")[0]


def test_the_node_runtime_and_the_local_executor_stamp_readings_with_the_node_and_its_clock(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    runtime = NodeRuntime(
        name="node-1",
        address="127.0.0.1",
        probe=FakeProbe("node-1", 2),
        data_dir=tmp_path,
        base_env={},
        cpus=1,
        memory_mib=1024,
        host_cpus=[0],
        clock=clock,
    )
    executor = LocalExecutor([runtime])
    clock.advance(30)
    reading = executor.telemetry("node-1", {1})
    assert [(s.node, s.index, s.time) for s in reading] == [("node-1", 0, clock.now()), ("node-1", 1, clock.now())]
    assert reading[0].utilization_pct == 0 and (reading[1].utilization_pct or 0) >= 60


# --- NVML, through a fake NVML module (tests/support/nvml.py) ---------------------------------


def sample(probe: NvmlProbe, at: datetime = T0) -> dict[int, GpuSample]:
    return {s.index: s for s in probe.sample("gpu-host", {0}, at)}


def test_nvml_readings_are_converted_to_mib_watts_and_joules() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1", util=0, power_mw=61_000, energy_mj=123_456)])
    got = sample(NvmlProbe(nvml))
    assert got[0] == GpuSample(
        node="gpu-host",
        index=0,
        uuid="GPU-0",
        time=T0,
        memory_used_mib=10240,
        memory_total_mib=81920,
        simulated=False,
        utilization_pct=75.0,
        temperature_c=61.0,
        power_w=312.5,
        energy_j=9000.0,
        ecc_errors=0,
        xid_errors=0,
        last_xid=None,
        power_limit_w=700.0,
    )
    assert (got[1].utilization_pct, got[1].power_w, got[1].energy_j) == (0.0, 61.0, 123.456)


def test_nvml_readings_a_gpu_does_not_offer_are_none() -> None:
    """MIG hides utilisation; pre-Volta boards have no energy counter; consumer boards no ECC;
    without privileges there are no XID events."""
    nvml = FakeNvml([FakeGpu("GPU-0", util=None, energy_mj=None, ecc=None, events=False)])
    got = sample(NvmlProbe(nvml))[0]
    assert (got.utilization_pct, got.energy_j, got.ecc_errors, got.xid_errors, got.last_xid) == (None,) * 5
    assert (got.memory_used_mib, got.temperature_c, got.power_w) == (10240, 61.0, 312.5)


def test_nvml_xid_events_are_counted_per_gpu_and_nvml_stays_initialised() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    probe = NvmlProbe(nvml)
    assert sample(probe)[1].xid_errors == 0
    nvml.pending = [Event(1, 0x8, 79), Event(1, 0x8, 48), Event(0, 0x1, 0)]  # the last is no XID
    got = sample(probe, T0 + timedelta(seconds=5))
    assert (got[0].xid_errors, got[0].last_xid) == (0, None)
    assert (got[1].xid_errors, got[1].last_xid) == (2, 48)
    assert sample(probe, T0 + timedelta(seconds=10))[1].xid_errors == 2  # counts only grow
    assert nvml.inits == 1, "initialised once for sampling, not per reading"


def test_nvml_sampling_without_a_driver_reads_nothing() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise NVMLError("driver not loaded")

    assert NvmlProbe(NoDriver([FakeGpu("GPU-0")])).sample("h", set(), T0) == []
    assert NvmlProbe(NoDriver([FakeGpu("GPU-0")])).gpus() == []


def test_nvml_a_gpu_that_cannot_be_read_at_all_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    class Lost(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
            if handle == 0:
                raise NVMLError("GPU is lost")
            return super().nvmlDeviceGetMemoryInfo(handle)

    got = NvmlProbe(Lost([FakeGpu("GPU-0"), FakeGpu("GPU-1")])).sample("h", set(), T0)
    assert [s.uuid for s in got] == ["GPU-1"]
    assert "cannot read GPU 0" in caplog.text


def test_nvml_describes_gpus_through_the_same_injected_module() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    describe: Callable[[], list[GpuInfo]] = NvmlProbe(nvml).gpus
    assert [(g.index, g.uuid, g.memory_mib, g.simulated) for g in describe()] == [
        (0, "GPU-0", 81920, False),
        (1, "GPU-1", 81920, False),
    ]
    assert nvml.inits == 0, "describing shuts NVML down again"

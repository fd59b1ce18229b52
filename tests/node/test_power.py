"""Per-job GPU power on a node (issue 33): the probes set and restore limits and clock locks (a fake
NVML, simulated GPUs), and a node runtime driving real workers sets a job's setting before it runs
and gives the GPU back what its remaining workers allow however the worker ends: its exit, SIGKILL of
the worker or of its supervisor, a head that restarted and re-adopted it, a node whose runtime died
with it. A GPU shared by jobs runs at the most they allow; a node where NVML refuses runs the job at
the default and says so."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupool.domain.launch import LaunchRequest, PowerSetting, WorkerExit, WorkerHandle
from gpupool.domain.power import PowerRange
from gpupool.executors.local import LocalExecutor
from gpupool.node.gpu.fake import FakeProbe, load_hardware
from gpupool.node.gpu.nvml import NvmlProbe
from gpupool.node.gpu.probe import PowerRefused
from gpupool.node.gpu.simulated import SimulatedSensors
from gpupool.node.power import RECORDS
from gpupool.node.runtime import NodeRuntime
from tests.support.headproc import wait_for
from tests.support.node_runtime import request, supervisor_pid, worker_pid
from tests.support.nvml import FakeGpu, FakeNvml

T0 = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)
W400 = PowerSetting("limit", 400)
W500 = PowerSetting("limit", 500)
MHZ900 = PowerSetting("clocks", 900)


# --- the probes ---------------------------------------------------------------------------------


def test_nvml_says_each_gpus_range_and_sets_limits_clock_locks_and_the_default() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1", default_mw=None)])  # GPU 1: no power management
    probe = NvmlProbe(nvml)
    described = probe.gpus()
    assert [(g.power_min_w, g.power_max_w, g.power_default_w) for g in described] == [(200, 700, 700), (None,) * 3]
    assert probe.power_range(0) == PowerRange(200, 700, 700) and probe.power_range(1) is None
    probe.apply_power(0, W400)
    assert (nvml.gpus[0].limit_mw, nvml.gpus[0].clocks) == (400_000, None)
    assert probe.sample("h", {0}, T0)[0].power_limit_w == 400.0  # the limit NVML enforces, read back
    probe.apply_power(0, MHZ900)
    assert (nvml.gpus[0].limit_mw, nvml.gpus[0].clocks) == (700_000, (900, 900))  # a lock runs at the default limit
    probe.apply_power(0, None)
    assert (nvml.gpus[0].limit_mw, nvml.gpus[0].clocks) == (700_000, None)
    assert probe.sample("h", {0}, T0)[1].power_limit_w is None  # a GPU that cannot say


def test_nvml_refusals_reach_the_caller_in_nvmls_words_and_change_nothing() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1", default_mw=None)])
    probe = NvmlProbe(nvml)
    nvml.refuse = "Insufficient Permissions"
    with pytest.raises(PowerRefused, match=r"^NVML: Insufficient Permissions$"):
        probe.apply_power(0, W400)
    assert nvml.gpus[0].limit_mw == 700_000 and nvml.settings == []
    nvml.refuse = None
    with pytest.raises(PowerRefused, match="NVML: Invalid Argument"):
        probe.apply_power(0, PowerSetting("limit", 150))  # below the GPU's minimum
    with pytest.raises(PowerRefused, match="NVML: not supported"):
        probe.apply_power(1, W400)


def test_simulated_gpus_have_a_range_keep_their_limit_and_obey_it() -> None:
    capped, free = (
        FakeProbe("n", 2, sensors=SimulatedSensors(seed=3)),
        FakeProbe("n", 2, sensors=SimulatedSensors(seed=3)),
    )
    assert [(g.power_min_w, g.power_max_w, g.power_default_w) for g in capped.gpus()] == [(200, 700, 700)] * 2
    assert capped.power_range(1) == PowerRange(200, 700, 700) and capped.power_range(2) is None
    capped.apply_power(0, W400)
    capped.apply_power(1, MHZ900)
    with pytest.raises(PowerRefused, match="outside 200-700 W"):
        capped.apply_power(0, PowerSetting("limit", 100))
    for t in range(0, 600, 7):
        now = T0 + timedelta(seconds=t)
        (c0, c1), (f0, _) = capped.sample("n", {0, 1}, now), free.sample("n", {0, 1}, now)
        assert (c0.power_w or 0) <= 400 and c0.power_limit_w == 400 and f0.power_limit_w == 700
        assert (c1.power_w or 0) <= 435 and c1.power_limit_w == 700  # the curve's draw at 900 MHz
        # As fast as the H100's curve says at 400 W (0.689): so much less busy in a reading.
        assert (c0.utilization_pct or 0) == pytest.approx(0.689 * (f0.utilization_pct or 0), abs=0.1)
    capped.apply_power(0, None)
    assert capped.sample("n", {0}, T0)[0].power_limit_w == 700


def test_gpus_a_hardware_description_lists_have_their_models_range(tmp_path: Path) -> None:
    path = tmp_path / "hw.json"
    path.write_text(json.dumps({"nodes": [{"name": "a", "gpus": [{"model": "A100"}, {"model": "H100"}]}]}))
    probe = load_hardware(path)[0]
    assert [(g.power_min_w, g.power_max_w) for g in probe.gpus()] == [(114, 400), (200, 700)]
    probe.apply_power(0, PowerSetting("limit", 300))
    assert probe.sample("a", {0}, T0)[0].power_limit_w == 300


# --- a node runtime driving real workers -----------------------------------------------------------


def node(data_dir: Path, nvml: FakeNvml) -> NodeRuntime:
    return NodeRuntime(
        name="n1",
        address="127.0.0.1",
        probe=NvmlProbe(nvml),
        data_dir=data_dir,
        base_env=dict(os.environ),
        cpus=1,
        memory_mib=0,
        host_cpus=sorted(os.sched_getaffinity(0)),
        cgroups_wanted=False,
    )


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1")])


@pytest.fixture
def rt(tmp_path: Path, nvml: FakeNvml) -> Iterator[NodeRuntime]:
    runtime = node(tmp_path / "node", nvml)
    yield runtime
    runtime.close()


def job(job_id: int, setting: PowerSetting | None, gpus: tuple[int, ...] = (0,), **kw: object) -> LaunchRequest:
    return replace(request(job_id, ["sleep", "60"], grace_s=1.0), gpus=gpus, gpu_power=setting, **kw)  # type: ignore[arg-type]


def ended(rt: NodeRuntime, handle: WorkerHandle) -> WorkerExit:
    return wait_for(lambda: rt.poll(handle), timeout=30, interval=0.05, what="the worker's end")  # type: ignore[no-any-return]


def limits(nvml: FakeNvml) -> list[int]:
    return [g.limit_mw // 1000 for g in nvml.gpus]


def record(rt: NodeRuntime, index: int) -> dict[str, object] | None:
    path = rt.data_dir / RECORDS / f"gpu-{index}.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_the_limit_is_set_before_the_worker_runs_and_restored_when_it_ends(rt: NodeRuntime, nvml: FakeNvml) -> None:
    handle = rt.launch(job(1, W400, gpus=(0, 1)))
    assert handle.power_note == "GPU 0 of n1: 400 W limit set; GPU 1 of n1: 400 W limit set"
    assert limits(nvml) == [400, 400]
    path = rt.data_dir / RECORDS / "gpu-0.json"
    assert path.stat().st_mode & 0o777 == 0o600 and (path.parent.stat().st_mode & 0o777) == 0o700
    assert record(rt, 0) == {
        "gpu": 0,
        "applied": {"kind": "limit", "value": 400},
        "throttle": None,
        "workers": {handle.run_dir: {"kind": "limit", "value": 400}},
    }
    assert WorkerHandle.from_json(handle.to_json()) == handle  # the note is kept with the handle
    worker_pid(handle)
    assert rt.poll(handle) is None and limits(nvml) == [400, 400]
    rt.kill(handle)
    assert ended(rt, handle).exit_code is not None
    assert limits(nvml) == [700, 700] and record(rt, 0) is None and record(rt, 1) is None


def test_a_job_at_max_leaves_its_gpus_untouched_and_says_nothing(rt: NodeRuntime, nvml: FakeNvml) -> None:
    handle = rt.launch(replace(job(1, None), argv=("true",)))
    assert handle.power_note is None and "power_note" not in handle.to_json()  # stored handles as before
    ended(rt, handle)
    assert nvml.settings == [] and record(rt, 0) is None


@pytest.mark.parametrize("victim", ["worker", "supervisor"])
def test_a_sigkilled_worker_or_supervisor_gives_the_gpu_back(rt: NodeRuntime, nvml: FakeNvml, victim: str) -> None:
    handle = rt.launch(job(1, MHZ900))
    assert handle.power_note == "GPU 0 of n1: SM clocks locked at 900 MHz" and nvml.gpus[0].clocks == (900, 900)
    pid = worker_pid(handle) if victim == "worker" else supervisor_pid(handle)
    os.kill(pid, signal.SIGKILL)
    end = ended(rt, handle)
    assert end.lost == (victim == "supervisor")
    assert nvml.gpus[0].clocks is None and limits(nvml) == [700, 700] and record(rt, 0) is None


def test_a_restarted_head_readopts_the_worker_with_its_limit_and_restores_at_its_end(
    tmp_path: Path, nvml: FakeNvml
) -> None:
    first = node(tmp_path / "node", nvml)
    handle = first.launch(job(1, W400))
    worker_pid(handle)
    first.close()  # the head dies; its worker runs on
    second = node(tmp_path / "node", nvml)
    try:
        assert limits(nvml) == [400, 700] and record(second, 0) is not None  # still its worker's
        found = second.find(1, 1, 0)
        assert found is not None and second.poll(found) is None
        second.kill(found)
        ended(second, found)
        assert limits(nvml) == [700, 700] and record(second, 0) is None
    finally:
        second.close()


def test_a_runtime_started_over_a_dead_ones_record_restores_the_gpu(tmp_path: Path, nvml: FakeNvml) -> None:
    first = node(tmp_path / "node", nvml)
    handle = first.launch(job(1, W400))
    worker = worker_pid(handle)
    os.kill(supervisor_pid(handle), signal.SIGKILL)  # the node went down with its workers: nobody polled
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text(), 10)
    first.close()
    assert limits(nvml) == [400, 700]
    second = node(tmp_path / "node", nvml)  # the node's runtime starts again
    try:
        assert limits(nvml) == [700, 700] and record(second, 0) is None
    finally:
        second.close()


def test_a_shared_gpu_runs_at_the_most_its_jobs_allow(rt: NodeRuntime, nvml: FakeNvml) -> None:
    def share(job_id: int, setting: PowerSetting | None) -> WorkerHandle:
        return rt.launch(job(job_id, setting, gpu_share=0.25))

    low = share(1, W400)
    assert low.power_note == "GPU 0 of n1: 400 W limit set" and limits(nvml)[0] == 400
    high = share(2, W500)
    assert high.power_note == "GPU 0 of n1: 500 W limit set" and limits(nvml)[0] == 500
    lower = share(3, PowerSetting("limit", 300))
    assert lower.power_note == (
        "GPU 0 of n1: shared, so it runs at a 500 W limit, the most its jobs allow (this job asked for a 300 W limit)"
    )
    at_max = share(4, None)
    assert at_max.power_note == "GPU 0 of n1: back to its default 700 W, as this job at max shares it"
    assert limits(nvml)[0] == 700
    for handle, then in ((at_max, 500), (high, 400), (lower, 400), (low, 700)):
        rt.kill(handle)
        ended(rt, handle)
        assert limits(nvml)[0] == then
    assert record(rt, 0) is None


def test_where_nvml_refuses_the_job_runs_at_the_default_and_says_so(rt: NodeRuntime, nvml: FakeNvml) -> None:
    nvml.refuse = "Insufficient Permissions"
    handle = rt.launch(job(1, W400))
    assert handle.power_note == (
        "GPU 0 of n1: could not set a 400 W limit (NVML: Insufficient Permissions); it runs at its default 700 W"
    )
    assert limits(nvml) == [700, 700] and record(rt, 0) == {
        "gpu": 0,
        "applied": None,  # never a cap it could not set
        "throttle": None,
        "workers": {handle.run_dir: {"kind": "limit", "value": 400}},
    }
    rt.kill(handle)
    ended(rt, handle)
    assert record(rt, 0) is None and nvml.settings == []


def test_the_heads_throttle_lowers_a_running_jobs_gpu_and_gives_it_back(rt: NodeRuntime, nvml: FakeNvml) -> None:
    executor = LocalExecutor([rt])
    handle = rt.launch(job(1, W500))
    assert executor.set_gpu_power("n1", [0], PowerSetting("limit", 300)) == ["GPU 0 of n1: at a 300 W limit"]
    assert limits(nvml)[0] == 300
    assert executor.set_gpu_power("n1", [0], None) == ["GPU 0 of n1: at a 500 W limit"]  # what its job asked
    assert executor.set_gpu_power("n1", [1], W400) == ["GPU 1 of n1: no job runs on it; left at its default 700 W"]
    executor.set_gpu_power("n1", [0], PowerSetting("limit", 300))
    nvml.refuse = "Insufficient Permissions"
    assert executor.set_gpu_power("n1", [0], None) == [
        "GPU 0 of n1: could not set a 500 W limit (NVML: Insufficient Permissions); it runs at a 300 W limit"
    ]
    nvml.refuse = None
    rt.kill(handle)
    ended(rt, handle)
    assert limits(nvml) == [700, 700] and record(rt, 0) is None


def test_forgetting_a_job_whose_end_was_never_polled_gives_its_gpu_back(rt: NodeRuntime, nvml: FakeNvml) -> None:
    handle = rt.launch(job(1, W400))
    os.kill(worker_pid(handle), signal.SIGKILL)
    wait_for(lambda: (Path(handle.run_dir) / "exit.json").exists(), 10)
    rt.forget([1])
    assert limits(nvml) == [700, 700] and record(rt, 0) is None

"""Fractional GPUs keep to their share of memory (issue 14, part 5): the limit, the MPS setting,
what each probe says a worker's processes hold, and the watch that stops a worker past its share."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from gpupool.domain.launch import WorkerHandle
from gpupool.node import gpu_share, rundir
from gpupool.node.gpu.fake import SIMULATED_USE_ENV, simulated_memory_use
from gpupool.node.gpu.nvml import NvmlProbe
from tests.support.headproc import pid_alive, wait_for
from tests.support.nvml import FakeGpu, FakeNvml


def test_the_share_is_what_was_asked_else_the_fraction_of_the_gpu() -> None:
    assert gpu_share.share_limit_mib(0.5, 0, 81920) == 40960
    assert gpu_share.share_limit_mib(0.25, 12000, 81920) == 12000
    assert gpu_share.share_limit_mib(1.0, 0, 81920) == 0  # a whole GPU is its worker's
    assert gpu_share.share_limit_mib(0.0, 0, 81920) == 0


def test_mps_is_used_only_where_its_control_daemon_listens(tmp_path: Path) -> None:
    assert not gpu_share.mps_running({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)})
    (tmp_path / "control").touch()
    assert gpu_share.mps_running({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)})
    assert gpu_share.mps_env(40960) == {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M"}


def test_nvml_counts_the_compute_and_graphics_memory_of_the_given_processes_only() -> None:
    gib = 2**30
    nvml = FakeNvml(
        [
            FakeGpu("GPU-a", compute={10: 3 * gib, 11: 5 * gib, 99: 7 * gib}, graphics={10: gib}),
            FakeGpu("GPU-b", compute={99: gib, 12: None}, graphics=None),  # None: NVML cannot tell
        ]
    )
    probe = NvmlProbe(nvml)
    assert probe.used_by({10, 11, 12}) == {0: 9 * 1024}
    assert probe.used_by({99}) == {0: 7 * 1024, 1: 1024}
    assert probe.used_by(set()) == {}


@pytest.fixture
def declaring() -> Iterator[subprocess.Popen[bytes]]:
    """A process on simulated GPUs 1 and 3 that says it holds 3000 MiB on each, in a group of its own."""
    env = {**os.environ, SIMULATED_USE_ENV: "3000", "CUDA_VISIBLE_DEVICES": "1,3"}
    proc = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_simulated_processes_hold_what_their_environment_declares(declaring: subprocess.Popen[bytes]) -> None:
    wait_for(lambda: SIMULATED_USE_ENV.encode() in Path(f"/proc/{declaring.pid}/environ").read_bytes())
    assert simulated_memory_use({declaring.pid, os.getpid()}) == {1: 3000, 3: 3000}
    assert simulated_memory_use({os.getpid(), 2**22 + 7}) == {}  # declares nothing; does not exist


class Probe:
    """A probe whose processes hold what the test says: GPU index -> MiB for every pid asked about."""

    def __init__(self, held: dict[int, int]) -> None:
        self.held = held
        self.asked: list[set[int]] = []

    def used_by(self, pids: Collection[int]) -> dict[int, int]:
        self.asked.append(set(pids))
        return dict(self.held) if pids else {}


def _worker(tmp_path: Path, proc: subprocess.Popen[bytes]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    spec = rundir.RunSpec(argv=("sleep",), env={}, log=str(tmp_path / "log"), header="")
    (run / rundir.SPEC).write_text(spec.to_json())
    rundir.write_child(run, rundir.ChildRecord(pid=proc.pid, pgid=proc.pid))
    return run


def test_the_watch_stops_a_worker_past_its_share_and_says_why(
    tmp_path: Path, declaring: subprocess.Popen[bytes]
) -> None:
    run = _worker(tmp_path, declaring)
    now = [100.0]
    probe = Probe({1: 4000, 3: 9000})
    watch = gpu_share.GpuShareWatch(probe, every_s=1.0, clock=lambda: now[0])  # type: ignore[arg-type]
    handle = WorkerHandle(1, str(run), gpu=1, gpu_limit_mib=4000)

    assert not watch.check(handle)  # at its limit, not past it
    assert probe.asked == [{declaring.pid}]  # its process group's processes
    probe.held[1] = 4001
    assert not watch.check(handle) and len(probe.asked) == 1  # checked again only after every_s
    assert pid_alive(declaring.pid)
    now[0] += 1.0
    assert watch.check(handle)
    assert declaring.wait(timeout=5) == -signal.SIGKILL
    stop = rundir.read_stop(run)
    assert stop is not None and stop.reason == "gpu_oom"
    assert "held 4001 MiB of GPU 1's memory, over its share of 4000 MiB" in stop.note
    assert "gpupool: stopping the worker: it held 4001 MiB" in (tmp_path / "log").read_text()
    now[0] += 5
    assert not watch.check(handle)  # stopped once

    whole = WorkerHandle(1, str(run))  # a whole GPU: no limit, never asked
    assert not gpu_share.GpuShareWatch(probe).check(whole) and len(probe.asked) == 2


def test_worker_processes_are_its_process_group_without_a_cgroup(tmp_path: Path) -> None:
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 61 & wait"], start_new_session=True)
    try:
        run = _worker(tmp_path, shell)
        spec = rundir.read_spec(run)
        wait_for(lambda: len(gpu_share.worker_pids(run, spec)) == 3, what="the shell and its two children")
        found = gpu_share.worker_pids(run, spec)
        assert shell.pid in found and os.getpid() not in found
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()

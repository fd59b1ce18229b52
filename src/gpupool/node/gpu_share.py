"""Fractional GPUs keep to their share of the GPU's memory.

A worker placed on part of a GPU (``--gpus 0.5``) may use its ``--gpu-memory``, or else its share
of the GPU's memory. Where an MPS control daemon runs, CUDA enforces that itself: the worker is
given ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and its allocations past it fail. In every case the
node runtime watches what the worker's processes hold through the probe (NVML per process, or
what simulated processes declare) and stops a worker past its share at once (SIGKILL, no grace:
every second it keeps the memory its neighbour may fail to get), recording ``gpu_oom``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gpupool.domain.launch import Stats, WorkerHandle
from gpupool.node import cgroups, rundir
from gpupool.node.gpu.probe import GpuProbe

log = logging.getLogger("gpupool.gpu_share")

GPU_OOM = "gpu_oom"  # the exit reason (domain/exit_reasons.py)
CHECK_EVERY_S = 1.0  # per worker: a query of the GPU's processes costs about a millisecond
MPS_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
DEFAULT_MPS_PIPE = "/tmp/nvidia-mps"  # where CUDA clients look for the MPS control daemon unless told


def share_limit_mib(share: float, asked_mib: int, gpu_memory_mib: int) -> int:
    """The most GPU memory a worker with ``share`` of a GPU may hold; 0 for a whole GPU (no limit)."""
    if share <= 0 or share >= 1:
        return 0
    return asked_mib or int(share * gpu_memory_mib)


def mps_running(environ: Mapping[str, str]) -> bool:
    """Whether an MPS control daemon listens where CUDA clients of this node would look for it."""
    pipe = Path(environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_MPS_PIPE)
    return (pipe / "control").exists()


def mps_env(limit_mib: int) -> dict[str, str]:
    """The worker's one visible GPU is device 0 to CUDA: its memory limit under MPS."""
    return {MPS_LIMIT_ENV: f"0={limit_mib}M"}


class GpuShareWatch:
    def __init__(
        self,
        probe: GpuProbe,
        layout: cgroups.Layout | None = None,
        every_s: float = CHECK_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._layout = layout
        self._every_s = every_s
        self._clock = clock
        self._checked: dict[str, float] = {}
        self._specs: dict[str, rundir.RunSpec] = {}

    def check(self, handle: WorkerHandle) -> bool:
        """Stop the worker of ``handle`` if it holds more than its share; True if it was stopped.
        Checks each worker at most every ``every_s``."""
        limit, gpu, run_dir = handle.gpu_limit_mib, handle.gpu, handle.run_dir
        if not limit or gpu is None or rundir.read_stop(Path(run_dir)) is not None:
            return False
        now = self._clock()
        if now - self._checked.get(run_dir, -self._every_s) < self._every_s:
            return False
        self._checked[run_dir] = now
        spec = self._spec(run_dir)
        if spec is None:
            return False
        used = self._probe.used_by(worker_pids(Path(run_dir), spec, self._layout)).get(gpu, 0)
        if used <= limit:
            return False
        why = f"it held {used} MiB of GPU {gpu}'s memory, over its share of {limit} MiB (--gpu-memory)"
        rundir.write_stop(Path(run_dir), rundir.StopRecord(GPU_OOM, why))
        with contextlib.suppress(OSError), open(spec.log, "a") as out:
            out.write(f"gpupool: stopping the worker: {why}\n")
        log.info("stopping %s: %s", run_dir, why)
        stop_now(Path(run_dir), spec, self._layout)
        return True

    def forget(self, run_dir: str) -> None:
        self._checked.pop(run_dir, None)
        self._specs.pop(run_dir, None)

    def _spec(self, run_dir: str) -> rundir.RunSpec | None:
        if run_dir not in self._specs:
            try:
                self._specs[run_dir] = rundir.read_spec(Path(run_dir))
            except (OSError, ValueError, KeyError):
                return None
        return self._specs[run_dir]


def stop_now(run_dir: Path, spec: rundir.RunSpec, layout: cgroups.Layout | None = None) -> None:
    """SIGKILL the worker's process group and its whole cgroup; its supervisor sees it end and
    records the exit (and empties and removes the cgroup) as for any other."""
    child = rundir.read_child(run_dir)
    if child is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pgid, signal.SIGKILL)
    if spec.cgroup is not None:
        with contextlib.suppress(ValueError, OSError):
            spec.group(layout).kill()


def worker_stats(run_dir: Path, layout: cgroups.Layout | None = None) -> Stats | None:
    """A worker's use of memory and CPU, from its cgroup; None without one."""
    try:
        spec = rundir.read_spec(run_dir)
    except (OSError, ValueError, KeyError):
        return None
    if spec.cgroup is None:
        return None
    try:
        return spec.group(layout).stats()
    except (ValueError, OSError):
        return None


def worker_pids(run_dir: Path, spec: rundir.RunSpec, layout: cgroups.Layout | None = None) -> set[int]:
    """Every process of the worker: its cgroup's members where it has one, else its process group."""
    if spec.cgroup is not None:
        with contextlib.suppress(ValueError, OSError):
            return spec.group(layout).pids()
    child = rundir.read_child(run_dir)
    if child is None:
        return set()
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(entry.path, "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[2]) == child.pgid:
                    found.add(int(entry.name))
    return found

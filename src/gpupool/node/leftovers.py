"""Stopping what a node's workers left behind: a worker's process group and cgroup, and every
supervisor under a node's directory (``gpupool down``, a node leaving, a node coming back)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from gpupool.node import rundir


def kill_worker_group(run_dir: Path, sig: signal.Signals) -> None:
    """The worker's process group, and its whole cgroup (what left the group too) when it has one."""
    child = rundir.read_child(run_dir)
    if child is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pgid, sig)
    try:
        spec = rundir.read_spec(run_dir)
    except (OSError, ValueError, KeyError):
        return
    if spec.cgroup is not None and sig == signal.SIGKILL:
        with contextlib.suppress(ValueError, OSError):
            group = spec.group()
            group.kill()
            if group.wait_empty(timeout=5):
                group.remove()


def stop_leftovers(data_dir: Path, note: str) -> int:
    """Kill every supervisor and worker under ``data_dir`` that has no recorded exit, and record
    each as fenced (the head sees it lost). Needs no runtime: ``gpupool join`` calls it as its
    node leaves."""
    stopped = 0
    for run_dir in rundir.all_run_dirs(data_dir):
        if rundir.read_exit(run_dir) is not None:
            continue
        pid = rundir.read_pid(run_dir)
        if pid is not None and rundir.supervisor_running(pid, run_dir):
            signal_pid(pid, signal.SIGKILL)
        kill_worker_group(run_dir, signal.SIGKILL)
        rundir.write_exit(run_dir, rundir.ExitRecord(None, fenced=True, note=note))
        stopped += 1
    return stopped


def signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)

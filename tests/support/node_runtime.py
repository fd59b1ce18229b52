"""A node runtime on this machine without Ray (node "n1", a fake probe of two GPUs), the launch
request of a one-worker job, and the pids a launched worker's run dir says: what the node tests drive
real processes through."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpupool.domain.launch import LaunchRequest, WorkerHandle
from gpupool.node.gpu.fake import FakeProbe
from gpupool.node.runtime import NodeRuntime
from tests.support.headproc import wait_for


def runtime(data_dir: Path, *, lease_timeout_s: float | None = None, detach: bool = False) -> NodeRuntime:
    return NodeRuntime(
        name="n1",
        address="127.0.0.1",
        probe=FakeProbe("n1", 2),
        data_dir=data_dir,
        base_env=dict(os.environ),
        cpus=1,
        memory_mib=0,
        host_cpus=sorted(os.sched_getaffinity(0)),
        lease_timeout_s=lease_timeout_s,
        detach=detach,
    )


def request(job_id: int, argv: list[str], grace_s: float = 5.0) -> LaunchRequest:
    return LaunchRequest(
        job_id=job_id,
        attempt=1,
        worker=0,
        argv=tuple(argv),
        env={},
        workdir=None,
        cpus=(),
        gpus=(),
        memory_mib=0,
        grace_s=grace_s,
        header=f"--- job {job_id} ---",
    )


def supervisor_pid(handle: WorkerHandle) -> int:
    """A detached launch returns at once; the supervisor's pid appears in its run dir."""
    path = Path(handle.run_dir) / "supervisor.pid"
    return int(wait_for(lambda: path.exists() and path.read_text().strip(), 10))


def worker_pid(handle: WorkerHandle) -> int:
    child = Path(handle.run_dir) / "child.json"
    return int(json.loads(wait_for(lambda: child.exists() and child.read_text(), 10))["pid"])

"""A node runtime on this machine for the benchmarks that launch real workers through it
(launch_walls.py, netwall.py), and the root job they launch."""

from __future__ import annotations

import os
from pathlib import Path

from gpupool.domain.launch import LaunchRequest
from gpupool.node.gpu.fake import FakeProbe
from gpupool.node.runtime import NodeRuntime


def bench_runtime(data_dir: Path, gpus: int, device_dir: Path = Path("/dev")) -> NodeRuntime:
    return NodeRuntime(
        name="bench",
        address="127.0.0.1",
        probe=FakeProbe("bench", gpus),
        data_dir=data_dir,
        base_env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cpus=1,
        memory_mib=0,
        host_cpus=sorted(os.sched_getaffinity(0)),
        device_dir=device_dir,
    )


def root_job(
    job_id: int,
    argv: tuple[str, ...],
    env: dict[str, str] | None = None,
    memory_mib: int = 0,
    gpus: tuple[int, ...] = (),
) -> LaunchRequest:
    """A worker run as root (the benchmark's own account), told to allow it."""
    return LaunchRequest(
        job_id=job_id,
        attempt=1,
        worker=0,
        argv=argv,
        env=env or {},
        workdir=None,
        cpus=(),
        gpus=gpus,
        memory_mib=memory_mib,
        grace_s=1.0,
        header="-",
        run_as="root",
        allow_system_account=True,
    )

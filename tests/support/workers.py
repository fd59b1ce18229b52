"""Workers launched through a real node runtime in tests of a job's walls on its node (the
private namespace, images' roots): a request builder, and reading a worker's exit and log."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpupool.domain.launch import LaunchRequest, WorkerExit, WorkerHandle
from gpupool.node.runtime import NodeRuntime
from tests.support.headproc import wait_for


def request(job_id: int, script: str, *, account: str, worker: int = 0, gpus: str = "", **kw: Any) -> LaunchRequest:
    fields: dict[str, Any] = {
        "job_id": job_id,
        "attempt": 1,
        "worker": worker,
        "argv": ("sh", "-c", script),
        "env": {},
        "workdir": None,
        "cpus": (),
        "gpus": tuple(int(g) for g in gpus.split(",") if g),
        "memory_mib": 0,
        "grace_s": 2.0,
        "header": f"--- job {job_id} worker {worker} ---",
        "run_as": account,
    }
    return LaunchRequest(**{**fields, **kw})


def finish(rt: NodeRuntime, handle: WorkerHandle, timeout: float = 30) -> WorkerExit:
    return wait_for(lambda: rt.poll(handle), timeout=timeout, interval=0.05, what="the worker's exit")  # type: ignore[no-any-return]


def log(rt: NodeRuntime, job_id: int, worker: int = 0) -> str:
    return rt.read_log(job_id, worker).decode()


def said(rt: NodeRuntime, job_id: int, key: str, worker: int = 0) -> str:
    """The value of the job's ``KEY=value`` line, once it printed one."""
    found = wait_for(
        lambda: next((ln for ln in log(rt, job_id, worker).splitlines() if ln.startswith(key + "=")), None), 20
    )
    return str(found).split("=", 1)[1]


def namespace_alive(inode: str) -> bool:
    """Whether any process is still in the mount namespace ``mnt:[N]`` (then so are its mounts)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "mnt") == inode:
                    return True
            except OSError:
                continue
    return False


@contextlib.contextmanager
def walled_runtime(
    name: str, data_dir: Path, gpus: int, *, base_env: dict[str, str], **kw: Any
) -> Iterator[NodeRuntime]:
    """A node runtime with real walls (cgroups, the private namespace), for one test; skipped, with
    why, where this machine cannot give a job its private namespace."""
    import pytest

    from gpupool.node.gpu.fake import FakeProbe

    runtime = NodeRuntime(
        name=name,
        address="127.0.0.1",
        probe=FakeProbe(name, gpus),
        data_dir=data_dir,
        base_env=base_env,
        cpus=1,
        memory_mib=0,
        host_cpus=sorted(os.sched_getaffinity(0)),
        **kw,
    )
    if runtime.scratch_why is not None:
        runtime.close()
        pytest.skip(f"this node cannot give jobs a private namespace: {runtime.scratch_why}")
    try:
        yield runtime
    finally:
        runtime.close()

"""The executor contract (``domain/launch.py``) as the node keeps it: a handle is stored in the
format heads have always written, so a head upgraded in place re-attaches to running work; a
worker's GPUs reach it in ``CUDA_VISIBLE_DEVICES`` written by the node alone, from the request's
``gpus``, whatever the job's own environment says."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

from gpupool.domain.launch import LaunchRequest, Stats, WorkerExit, WorkerHandle
from gpupool.node.gpu.fake import FakeProbe
from gpupool.node.runtime import NodeRuntime
from tests.support.headproc import wait_for

RUN = "/data/nodes/n1/runs/job-3/attempt-1/worker-0"


@pytest.mark.parametrize(
    "stored",
    [
        {"pid": 4242, "run_dir": RUN},
        {"pid": 0, "run_dir": RUN},  # a detached supervisor still starting
        {"pid": 4242, "run_dir": RUN, "gpu": 1, "gpu_limit_mib": 4000},  # a GPU share, watched
        {"pid": 4242, "run_dir": RUN, "job": 3, "port": 8000},  # a port it serves, walled
        {"pid": 4242, "run_dir": RUN, "gpu": 0, "gpu_limit_mib": 2000, "job": 3, "port": 8000},
    ],
)
def test_a_stored_handle_reads_back_and_is_written_as_before(stored: dict[str, Any]) -> None:
    handle = WorkerHandle.from_json(json.loads(json.dumps(stored)))
    assert handle.to_json() == stored and list(handle.to_json()) == list(stored)
    assert (handle.pid, handle.run_dir, handle.port) == (stored["pid"], RUN, stored.get("port"))


def test_what_crosses_to_a_node_agent_pickles() -> None:
    """The Ray backend pickles the request, the exit and the reading; handles go as their JSON."""
    request = LaunchRequest(3, 1, 0, ("true",), {"A": "1"}, None, (0,), (1, 2), 0, 1.0, "-", port=8000)
    for value in (request, WorkerExit(None, lost=True), WorkerExit(137, reason="oom"), Stats(1, 2, 0.5)):
        assert pickle.loads(pickle.dumps(value)) == value


@pytest.mark.parametrize(("gpus", "seen"), [((1, 3), "1,3"), ((), "")], ids=["two-gpus", "no-gpu"])
def test_the_node_says_the_requests_gpus_whatever_the_job_env_says(
    tmp_path: Path, gpus: tuple[int, ...], seen: str
) -> None:
    rt = NodeRuntime(
        name="n1",
        address="127.0.0.1",
        probe=FakeProbe("n1", 4),
        data_dir=tmp_path / "data",
        base_env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        cpus=1,
        memory_mib=0,
        host_cpus=sorted(os.sched_getaffinity(0)),
        device_dir=tmp_path / "dev",  # no GPU device files: nothing to wall, nothing renumbered
    )
    show = "import os; print('CUDA=' + os.environ.get('CUDA_VISIBLE_DEVICES', '-'))"
    try:
        handle = rt.launch(
            LaunchRequest(
                job_id=1,
                attempt=1,
                worker=0,
                argv=(sys.executable, "-c", show),
                env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"},  # a node must not let the request's env win
                workdir=None,
                cpus=(),
                gpus=gpus,
                memory_mib=0,
                grace_s=1.0,
                header="--- job 1 ---",
            )
        )
        ended = wait_for(lambda: rt.poll(handle), 30, 0.05, "the worker's exit")
        text = rt.read_log(1, 0).decode()
        assert ended == WorkerExit(0), text
        assert f"CUDA={seen}\n" in text
    finally:
        rt.close()

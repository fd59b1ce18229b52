"""A worker on part of a GPU keeps to its share of the GPU's memory (issue 14, part 5), end to end
on simulated GPUs: processes declare what they hold (``GPUPOOL_SIMULATED_GPU_MEMORY_MIB``, read by
the fake probe as NVML's per-process query is read on real GPUs). Past its share a worker is
stopped with ``exit_reason: gpu_oom``; its neighbour on the same GPU keeps running."""

from __future__ import annotations

import time

import httpx
import pytest

from gpupool.node.gpu.fake import DEFAULT_MEMORY_MIB, SIMULATED_USE_ENV
from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e


def _holding(mib: int) -> list[str]:
    return ["env", f"{SIMULATED_USE_ENV}={mib}", "sleep", "120"]


def test_a_worker_past_its_share_of_a_shared_gpu_is_stopped_and_its_neighbour_runs_on(head: HeadProcess) -> None:
    share = DEFAULT_MEMORY_MIB // 2
    with head.client() as c:
        hog = c.submit(command=_holding(share + 1000), gpus=0.5, name="hog")["id"]
        wait_state(c, hog, ("running",))
        neighbour = c.submit(command=_holding(share - 1000), gpus=0.5, name="neighbour")["id"]
        asked = c.submit(command=_holding(20000), gpus=0.5, gpu_memory="16G", name="asked-16g")["id"]
        ended = wait_state(c, hog, ("failed",), timeout=30)
        assert (ended["exit_code"], ended["exit_reason"]) == (137, "gpu_oom")
        assert "gpu_oom" in [e["kind"] for e in ended["events"]]
        log = c.logs(hog).data.decode()
        assert f"over its share of {share} MiB (--gpu-memory)" in log, log
        # What it asked for is its share: 16 GiB, so 20000 MiB is past it.
        stopped = wait_state(c, asked, ("failed",), timeout=30)
        assert stopped["exit_reason"] == "gpu_oom" and "over its share of 16384 MiB" in c.logs(asked).data.decode()

        running = wait_state(c, neighbour, ("running",))
        gpu = running["placements"][0]
        assert gpu["gpu_share"] == 0.5
        time.sleep(2.5)  # past two checks of its memory (one a second): within its share, it runs on
        assert c.job(neighbour)["state"] == "running"
        shown = head.cli("show", str(hog))
        assert "137 (over its share of GPU memory: its --gpu-memory)" in shown.stdout, shown
        metrics = httpx.get(f"{head.url}/metrics", headers={"Authorization": f"Bearer {head.token()}"}).text
        assert 'gpupool_worker_kills_total{project="default",reason="gpu_oom"} 2.0' in metrics
        c.cancel(neighbour)

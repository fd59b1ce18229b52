"""Per-job GPU power on a real GPU (issue 33): a job submitted with ``gpu_power`` "400W" runs under
a 400 W limit, which NVML reads back while it runs, the job's events say the node set it, and the
GPU is back at its default limit once the job ended.

Part of the GPU suite (``scripts/test-gpu``, run as root: setting a limit needs it); skipped with
the reason elsewhere (``tests/gpu/conftest.py``). Every figure a check rests on is printed."""

from __future__ import annotations

import sys

import pytest

from gpupool.domain.jobs import JobSpec
from tests.gpu.conftest import GPUS
from tests.support.gpu_jobs import ended, said
from tests.support.headproc import HeadProcess, wait_for

WATTS = 400
LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("LOADING=1", flush=True)
end = time.monotonic() + 20
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def limits_w() -> list[float]:
    """The limit NVML enforces on each GPU now, in watts."""
    import pynvml

    return [pynvml.nvmlDeviceGetEnforcedPowerLimit(g["handle"]) / 1000.0 for g in GPUS]


def defaults_w() -> list[float]:
    import pynvml

    return [pynvml.nvmlDeviceGetPowerManagementDefaultLimit(g["handle"]) / 1000.0 for g in GPUS]


def test_a_job_at_400w_runs_under_that_limit_and_its_gpu_gets_its_default_back(gpu_head: HeadProcess) -> None:
    import pynvml

    low_mw, high_mw = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(GPUS[0]["handle"])
    if not low_mw <= WATTS * 1000 <= high_mw:
        pytest.skip(f"{WATTS} W is outside this GPU's range ({low_mw / 1000:g}-{high_mw / 1000:g} W)")
    defaults = defaults_w()
    print(f"power: defaults {defaults} W, enforced before the job {limits_w()} W")
    assert limits_w() == defaults, "every GPU starts at its default limit (an earlier run left none set)"
    spec = JobSpec.create(command=[sys.executable, "-c", LOAD], gpus=1, gpu_power=f"{WATTS}W", name="capped")
    with gpu_head.client() as c:
        job_id = int(c.submit(spec)["id"])
    said(gpu_head, job_id, "LOADING")
    running = limits_w()
    capped = [i for i, w in enumerate(running) if w == WATTS]
    print(f"power: enforced while the job runs {running} W")
    assert len(capped) == 1, "its one GPU runs under the job's limit, and no other GPU does"
    index = capped[0]
    draws = [pynvml.nvmlDeviceGetPowerUsage(GPUS[index]["handle"]) / 1000.0 for _ in range(5)]
    print(f"power: GPU {index} draws {draws} W under a {WATTS} W limit")
    assert max(draws) <= WATTS * 1.05
    with gpu_head.client() as c:
        events = [e["message"] for e in c.events(job_id) if e["kind"] == "power"]
    print(f"power: the job's events say {events}")
    assert any(f"GPU {index} of " in e and f"{WATTS} W limit set" in e for e in events)
    assert ended(gpu_head, job_id)["state"] == "succeeded"
    after = wait_for(lambda: (w := limits_w()) == defaults and w, timeout=30, interval=0.5, what="the defaults back")
    print(f"power: enforced after the job {after} W")

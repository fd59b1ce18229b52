"""gpupool on real NVIDIA GPUs (issue 29): what NVML says reaches ``gpupool nodes``, ``top``,
``/metrics`` and the report; per-job energy against the GPU's own counter; a fractional job over
its share stopped ``gpu_oom`` while its neighbour runs on; the MPS pinned limit; the device wall
(a ``--gpus 0`` job opens no GPU, even setting ``CUDA_VISIBLE_DEVICES`` itself); a private /tmp and
/dev/shm that CUDA jobs work in and that are gone at their end; the DDP example on nccl; a job's
published port refused to another job (issue 30's port wall on pure cgroup v2).

Every figure a check rests on is printed (``scripts/test-gpu`` runs pytest with ``-s``) so a
run's output is its record (README "On a real GPU"; docs/development.md "The GPU suite")."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from tests.gpu.conftest import GPUS
from tests.support import DIAL
from tests.support.dial import dialed
from tests.support.gpu_jobs import ended, job, log, said, submit
from tests.support.headproc import HeadProcess, free_port, wait_for
from tests.support.unix_accounts import TestAccounts

PY = sys.executable
GIB = 2**30


def energy_j(index: int = 0) -> float:
    import pynvml

    return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(GPUS[index]["handle"])) / 1000.0


LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("LOADING=1", flush=True)
end = time.monotonic() + {seconds}
n = 0
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
print("TFLOPS=%.0f" % (n * 2 * 8192**3 / {seconds} / 1e12), flush=True)
"""


def test_the_node_and_its_gpus_come_from_nvml_and_its_walls_hold(gpu_head: HeadProcess) -> None:
    out = gpu_head.cli("nodes", "-o", "json")
    assert out.returncode == 0, out.stderr
    (node,) = json.loads(out.stdout)
    print(
        f"node {node['name']}: " + ", ".join(f"{g['index']} {g['model']} {g['memory_mib']} MiB" for g in node["gpus"])
    )
    print("isolation:", json.dumps(node["isolation"], indent=1))
    assert [g["uuid"] for g in node["gpus"]] == [g["uuid"] for g in GPUS]
    assert not any(g["simulated"] for g in node["gpus"]) and not node["simulated"]
    walls = node["isolation"]
    assert not walls["devices"].startswith("none"), walls  # pure cgroup v2: the device program
    assert walls["tmp"].startswith("private") and walls["proc"].startswith("hidepid"), walls
    assert all(not walls[w].startswith("none") for w in ("memory", "cpus", "kill")), walls
    assert walls["network"].startswith("cgroup connect program"), walls  # issue 30: served ports walled


def test_telemetry_under_a_cuda_load_and_the_jobs_energy_against_the_gpus_counter(gpu_head: HeadProcess) -> None:
    seconds = 20
    job_id = submit(gpu_head, "--gpus", "1", "--name", "load", "--", PY, "-c", LOAD.format(seconds=seconds))
    said(gpu_head, job_id, "LOADING")
    start_j, start_t = energy_j(), time.monotonic()

    def busy() -> dict[str, Any] | None:
        top = json.loads(gpu_head.cli("top", "-o", "json").stdout)
        gpu = top["nodes"][0]["gpus"][0]
        hot = (gpu["utilization_pct"] or 0) >= 50 and (gpu["power_w"] or 0) >= 100
        return (
            gpu if hot and (gpu["memory_used_mib"] or 0) >= 500 and job_id in [j["id"] for j in gpu["jobs"]] else None
        )

    gpu = wait_for(busy, timeout=40, interval=1.0, what="top to show the GPU busy with the job")
    print(
        f"top: {gpu['utilization_pct']} % busy, {gpu['power_w']} W, {gpu['memory_used_mib']} MiB, {gpu['temperature_c']} C"
    )
    metrics = httpx.get(f"{gpu_head.url}/metrics", headers={"Authorization": f"Bearer {gpu_head.token()}"}).text
    series = {ln.split("{")[0] for ln in metrics.splitlines() if ln.startswith("DCGM_FI_DEV_")}
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    ):
        assert name in series, (name, sorted(series))
    final = ended(gpu_head, job_id)
    used_j, took = energy_j() - start_j, time.monotonic() - start_t
    assert final["state"] == "succeeded", log(gpu_head, job_id)
    print(f"the job: {said(gpu_head, job_id, 'TFLOPS')} TFLOP/s bf16")

    def reported() -> float | None:
        groups = json.loads(gpu_head.cli("report", "--by", "job", "-o", "json").stdout)["groups"]
        kwh = next((g["energy_kwh"] for g in groups if str(g["key"]) == str(job_id)), 0.0)
        return kwh or None

    kwh = float(wait_for(reported, timeout=60, interval=2.0, what="the report to hold the job's energy"))
    ratio = kwh * 3.6e6 / used_j
    print(
        f"energy: gpupool report {kwh * 3.6e6:.0f} J; the GPU's counter {used_j:.0f} J over {took:.1f} s; ratio {ratio:.3f}"
    )
    assert 0.8 <= ratio <= 1.1, ratio


HOLD = """
import os, time, torch
x = torch.empty({gib} * 2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("HELD=%d GiB, MPS limit %s" % ({gib}, os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "none")), flush=True)
time.sleep({sleep})
"""


def test_a_fractional_job_over_its_share_ends_gpu_oom_while_its_neighbour_runs_on(gpu_head: HeadProcess) -> None:
    calm = submit(gpu_head, "--gpus", "0.5", "--gpu-memory", "8GiB", "--", PY, "-c", HOLD.format(gib=2, sleep=60))
    said(gpu_head, calm, "HELD")
    hog = submit(gpu_head, "--gpus", "0.5", "--gpu-memory", "8GiB", "--", PY, "-c", HOLD.format(gib=12, sleep=60))
    said(gpu_head, hog, "HELD")
    held_at = time.monotonic()
    final = ended(gpu_head, hog, timeout=60)
    print(
        f"the hog (12 GiB of an 8 GiB share): {final['state']} {final['exit_reason']} {time.monotonic() - held_at:.1f} s after it held"
    )
    assert (final["state"], final["exit_reason"]) == ("failed", "gpu_oom"), final
    assert job(gpu_head, calm)["state"] == "running"
    assert gpu_head.cli("cancel", str(calm)).returncode == 0


PROBE = r"""
import errno, glob, os, re, subprocess
def tried(path):
    try:
        open(path, "rb").close()
        return 0
    except OSError as e:
        return e.errno
gpus = sorted(int(m.group(1)) for p in glob.glob("/dev/nvidia*") if (m := re.fullmatch(r"/dev/nvidia(\d+)", p)))
print("OPEN=" + ",".join(str(g) for g in gpus if tried(f"/dev/nvidia{g}") == 0), flush=True)
print("DENIED=" + ",".join(str(g) for g in gpus if tried(f"/dev/nvidia{g}") == errno.EPERM), flush=True)
print("ENV=%s %s" % (os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("GPUPOOL_GPUS")), flush=True)
print("INIT=%s" % os.path.exists("/proc/1"), flush=True)  # root's init: hidden from a person's job
import shutil
if shutil.which("nvidia-smi"):
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    print("SMI=" + (smi.stdout + smi.stderr).strip().replace("\n", " | "), flush=True)
else:
    print("SMI=absent", flush=True)
os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # the job's own choice: it must not widen what it reaches
import torch
print("TORCH=%s %d" % (torch.cuda.is_available(), torch.cuda.device_count()), flush=True)
if torch.cuda.is_available():
    print("SUM=%.0f" % torch.ones(1000, device="cuda").sum().item(), flush=True)
"""


@pytest.fixture(scope="module")
def person(gpu_head: HeadProcess, unix_accounts: TestAccounts) -> str:
    """A user of the head with a Unix account of their own (not root): the walls are theirs."""
    try:
        account = unix_accounts.make("gpu")
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot make a Unix account here: {exc.stderr}")
    out = gpu_head.cli("user", "add", "gpu-person", "--unix-user", account)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_a_job_reaches_exactly_its_gpus_even_setting_cuda_visible_devices_itself(
    gpu_head: HeadProcess, person: str
) -> None:
    """As a person's account: a --gpus 0 job opens no GPU's device file, CUDA and nvidia-smi find
    none even when it sets CUDA_VISIBLE_DEVICES itself; a --gpus 1 job opens its own GPU's and no
    other (EPERM), sees it as CUDA device 0, and sees none of root's processes."""
    every = ",".join(str(g["index"]) for g in GPUS)
    none = submit(gpu_head, "--gpus", "0", "--", PY, "-c", PROBE, token=person)
    mine = submit(gpu_head, "--gpus", "1", "--", PY, "-c", PROBE, token=person)
    for job_id in (none, mine):
        assert ended(gpu_head, job_id)["state"] == "succeeded", log(gpu_head, job_id)
        print(f"job {job_id}:", " ; ".join(ln for ln in log(gpu_head, job_id).splitlines() if "=" in ln))
    assert (said(gpu_head, none, "OPEN"), said(gpu_head, none, "DENIED")) == ("", every)
    assert said(gpu_head, none, "TORCH") == "False 0"
    assert said(gpu_head, none, "SMI") == "absent" or "No devices" in said(gpu_head, none, "SMI")
    own = job(gpu_head, mine)["placements"][0]["gpus"][0]
    others = ",".join(str(g["index"]) for g in GPUS if g["index"] != own)
    assert (said(gpu_head, mine, "OPEN"), said(gpu_head, mine, "DENIED")) == (str(own), others)
    assert said(gpu_head, mine, "TORCH") == "True 1" and said(gpu_head, mine, "SUM") == "1000"
    assert said(gpu_head, mine, "ENV") == f"0 {own}"
    assert said(gpu_head, mine, "INIT") == "False"  # hidepid: root's processes are not the job's to see


SCRATCH = r"""
import os, subprocess, torch
x = torch.ones(2**20, device="cuda")
with open("/dev/shm/gpupool-gpu-suite", "wb") as f:
    f.write(os.urandom(64 * 2**20))
open("/tmp/gpupool-gpu-suite", "w").write("left behind")
print("MOUNTS=" + " | ".join(ln.split(" - ")[0].split()[4] + " " + ln.split(" - ")[1].split()[0] for ln in open("/proc/self/mountinfo") if " /tmp " in ln or " /dev/shm " in ln), flush=True)
print("PROCS=%d" % len([p for p in os.listdir("/proc") if p.isdigit()]), flush=True)
print("CUDA=%.0f" % x.sum().item(), flush=True)
"""


def test_cuda_jobs_get_a_private_tmp_and_shm_gone_at_their_end(gpu_head: HeadProcess) -> None:
    job_id = submit(gpu_head, "--gpus", "1", "--memory", "8GiB", "--", PY, "-c", SCRATCH)
    assert ended(gpu_head, job_id)["state"] == "succeeded", log(gpu_head, job_id)
    print(
        f"job {job_id}: mounts {said(gpu_head, job_id, 'MOUNTS')}; processes it sees {said(gpu_head, job_id, 'PROCS')}"
    )
    assert said(gpu_head, job_id, "CUDA") == str(2**20)
    assert "/dev/shm tmpfs" in said(gpu_head, job_id, "MOUNTS") and "/tmp tmpfs" in said(gpu_head, job_id, "MOUNTS")
    assert not os.path.exists("/dev/shm/gpupool-gpu-suite") and not os.path.exists("/tmp/gpupool-gpu-suite")


def test_a_jobs_published_port_refuses_another_jobs_connect(gpu_head: HeadProcess) -> None:
    """Issue 30 on pure cgroup v2: a port a job publishes (--expose) is walled from every other
    job by the node's connect programs (EPERM), while the head's side (this test) still connects."""
    port = free_port()
    server = submit(gpu_head, "--gpus", "1", "--expose", str(port), "--", PY, "-m", "http.server", str(port))
    wait_for(lambda: reachable(port), 60, 0.2, "the job's server to listen")
    (node,) = json.loads(gpu_head.cli("nodes", "-o", "json").stdout)
    targets = sorted({f"127.0.0.1:{port}", f"{node['address']}:{port}"})  # loopback and the node's address
    dialer = submit(gpu_head, "--gpus", "0", "--", PY, DIAL, *targets)
    assert ended(gpu_head, dialer)["state"] == "succeeded", log(gpu_head, dialer)
    seen = dialed(log(gpu_head, dialer))
    print(f"another job's connects to job {server}'s published port {port}: {seen}; from outside: {reachable(port)}")
    assert seen == dict.fromkeys(targets, errno.EPERM), seen
    assert reachable(port)
    gpu_head.cli("cancel", str(server))
    ended(gpu_head, server)


def reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def test_the_ddp_example_trains_on_nccl(gpu_head: HeadProcess) -> None:
    example = os.path.join(os.getcwd(), "examples", "ddp_train.py")
    job_id = submit(gpu_head, "--gpus", "1", "--workers", "1", "--", PY, example, "--steps", "100")
    final = ended(gpu_head, job_id)
    text = log(gpu_head, job_id)
    print(f"job {job_id}: " + " | ".join(ln for ln in text.splitlines() if "rank" in ln or "final" in ln))
    assert final["state"] == "succeeded", text
    assert "nccl on cuda" in text and "final loss" in text, text


MPS_ALLOC = """
import os, torch
print("LIMIT=" + os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "none"), flush=True)
try:
    x = torch.empty(6 * 2**30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("HELD=6 GiB", flush=True)
except RuntimeError as e:
    print("REFUSED=" + str(e).splitlines()[0][:160], flush=True)
"""


def test_under_mps_a_fractional_job_is_held_to_its_pinned_memory(gpu_head: HeadProcess, mps_daemon: object) -> None:
    """The MPS daemon's pipe is in the host's /tmp: the job's private /tmp keeps it in sight."""
    job_id = submit(gpu_head, "--gpus", "0.5", "--gpu-memory", "4GiB", "--", PY, "-c", MPS_ALLOC)
    final = ended(gpu_head, job_id)
    text = log(gpu_head, job_id)
    print(f"job {job_id} under MPS: " + " ; ".join(ln for ln in text.splitlines() if "=" in ln))
    assert final["state"] == "succeeded", text
    assert said(gpu_head, job_id, "LIMIT") == "0=4096M"
    assert "out of memory" in said(gpu_head, job_id, "REFUSED").lower(), text

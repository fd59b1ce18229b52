"""The distributed training examples run through a real head unchanged: the rendezvous gpupool puts in
each worker's environment is enough for torch.distributed, the loss falls, and a requeued job
resumes from its checkpoint instead of starting over.

The jobs pass ``--device cpu`` because the head's GPUs are simulated: on a machine that also has
real GPUs, a simulated GPU index in CUDA_VISIBLE_DEVICES would select a real device.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.headproc import HeadProcess, wait_for, wait_state

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the examples need torch"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DDP = str(EXAMPLES / "ddp_train.py")
PIPELINE = str(EXAMPLES / "pipeline_train.py")
# One thread per worker: the workers of a job share a small machine's cores.
JOB_ENV = {"OMP_NUM_THREADS": "1"}
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$", re.MULTILINE)


def test_ddp_job_on_two_nodes_learns(head_factory: type[HeadProcess]) -> None:
    head = head_factory(nodes=2, gpus=1).start()  # one GPU a node: the two workers land on different nodes
    with head.client() as c:
        job_id = submit(c, [DDP, "--steps", "60"], gpus=1)
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=120)
        logs = [log_text(c, job_id, worker) for worker in (0, 1)]
    assert job["state"] == "succeeded", logs
    assert len({p["node"] for p in job["placements"]}) == 2
    for rank, log in enumerate(logs):
        assert f"rank {rank} of 2: gloo on cpu" in log, log
    steps = losses(logs[0])
    assert [s for s, _ in steps] == [1, 10, 20, 30, 40, 50, 60]
    assert steps[-1][1] < steps[0][1] / 4, steps
    assert "final loss" in logs[0] and not losses(logs[1]), "only rank 0 reports the loss"


def test_ddp_job_that_fails_once_resumes_from_its_checkpoint(head: HeadProcess, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    args = [DDP, "--steps", "40", "--log-every", "5", "--checkpoint-every", "10", "--fail-once-at", "20"]
    with head.client() as c:
        job_id = submit(c, [*args, "--checkpoint-dir", str(ckpt)], gpus=0, max_restarts=1)
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=120)
        log = log_text(c, job_id, 0)
        other = log_text(c, job_id, 1)
    assert job["state"] == "succeeded", log
    assert job["restarts"] == 1
    assert any(e["kind"] == "requeued" and "exited with code 3" in e["message"] for e in job["events"])
    first, second = split_attempts(log)
    assert "failing on purpose at step 20" in first and "resumed from" not in first
    assert [s for s, _ in losses(first)] == [1, 5, 10, 15, 20]
    assert "resumed from step 20" in second and "resumed from step 20" in split_attempts(other)[1]
    resumed = losses(second)
    assert [s for s, _ in resumed] == [25, 30, 35, 40], "the second attempt went on from step 20"
    assert resumed[0][1] < losses(first)[0][1] / 4, "the weights came back, not a fresh model"
    assert sorted(p.name for p in ckpt.iterdir()) == ["ckpt-000030.pt", "ckpt-000040.pt"]


def test_pipeline_job_learns(head: HeadProcess) -> None:
    with head.client() as c:
        job_id = submit(c, [PIPELINE, "--steps", "60"], gpus=0)
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=120)
        logs = [log_text(c, job_id, worker) for worker in (0, 1)]
    assert job["state"] == "succeeded", logs
    for rank, log in enumerate(logs):
        assert f"rank {rank} of 2: stage {rank}, gloo on cpu" in log, log
    steps = losses(logs[1])  # the last stage computes the loss
    assert [s for s, _ in steps] == [1, 10, 20, 30, 40, 50, 60]
    assert steps[-1][1] < steps[0][1] / 4, steps
    assert "final loss" in logs[1]


def test_pipeline_job_of_the_wrong_size_fails_with_one_line(head: HeadProcess) -> None:
    with head.client() as c:
        job_id = submit(c, [PIPELINE], gpus=0, workers=1)
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=60)
        log = log_text(c, job_id, 0)
    assert job["state"] == "failed" and job["exit_code"] == 2
    assert "error: pipeline_train.py needs exactly 2 workers (WORLD_SIZE=1)" in log
    assert "Traceback" not in log


def submit(c: Any, args: list[str], *, gpus: float, workers: int = 2, max_restarts: int = 0) -> int:
    command = [sys.executable, *args, "--device", "cpu"]
    job = c.submit(command=command, gpus=gpus, workers=workers, max_restarts=max_restarts, env=JOB_ENV)
    return int(job["id"])


def log_text(c: Any, job_id: int, worker: int) -> str:
    return str(c.logs(job_id, worker=worker).data.decode(errors="replace"))


def losses(log: str) -> list[tuple[int, float]]:
    return [(int(step), float(loss)) for step, loss in STEP_LINE.findall(log)]


def split_attempts(log: str) -> list[str]:
    """A worker's log holds every attempt, each after a ``--- gpupool: job N attempt A ...`` header."""
    parts = re.split(r"^--- gpupool: job \d+ attempt \d+ .*$", log, flags=re.MULTILINE)
    return parts[1:]


def test_the_inference_example_serves_its_model_with_the_threads_gpupool_gives_it(head: HeadProcess) -> None:
    """examples/inference/server.py as a service of one replica with --cpus 1: gpupool's
    OMP_NUM_THREADS=1 is what torch uses (its /healthz says so), GET /predict classifies the
    held-out set as well as training promised, and POST /predict gives a class and probabilities
    per row; a malformed body is a 400."""
    server = str(EXAMPLES / "inference" / "server.py")
    made = head.cli("serve", "mlp", "--gpus", "0", "--cpus", "1", "--replicas", "1", "--", sys.executable, server)
    assert made.returncode == 0, made.stderr
    with head.client() as c:
        s = wait_for(lambda: (x := c.service("mlp"))["endpoints"] and x, 120, 0.5, "the example's replica ready")
        (endpoint,) = s["endpoints"]
        base = f"http://{endpoint['host']}:{endpoint['port']}"
        health = httpx.get(f"{base}/healthz", timeout=10).json()
        assert (health["threads"], health["omp_num_threads"], health["status"]) == (1, 1, "ok"), health
        assert health["accuracy"] > 0.8, health
        got = httpx.get(f"{base}/predict?rows=512", timeout=30).json()
        assert got["rows"] == 512 and got["accuracy"] > 0.8 and all(0 <= k < 10 for k in got["classes"])
        rows = [[0.0] * 64, [1.0] * 64]
        answer = httpx.post(f"{base}/predict", json={"inputs": rows}, timeout=30).json()
        assert len(answer["classes"]) == 2 and all(abs(sum(p) - 1) < 1e-3 for p in answer["scores"]), answer
        bad = httpx.post(f"{base}/predict", json={"inputs": [[1.0, 2.0]]}, timeout=10)
        assert bad.status_code == 400 and "64 numbers" in bad.json()["error"]
        assert httpx.get(f"{base}/predict?rows=0", timeout=10).status_code == 400
    assert head.cli("service", "delete", "mlp").returncode == 0

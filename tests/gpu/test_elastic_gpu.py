"""The elastic example on the real GPUs with nccl (issue 35): a ``--workers 1:N`` job (N: the GPUs
here, one each) starts on one, grows into the others while nothing else waits, and trains with
nccl on CUDA through every re-form, its loss falling. On a one-GPU machine it trains on one."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.gpu.conftest import GPUS
from tests.support.gpu_jobs import ended, log, submit
from tests.support.headproc import HeadProcess

ELASTIC = str(Path(__file__).resolve().parents[2] / "examples" / "elastic_train.py")
EPOCH_LINE = re.compile(r"^epoch (\d+) world (\d+) loss (\S+)$", re.MULTILINE)


def test_the_elastic_example_trains_with_nccl_on_the_real_gpus(gpu_head: HeadProcess, tmp_path: Path) -> None:
    most = max(1, len(GPUS))
    launch = (
        f"exec {sys.executable} -m torch.distributed.run --nnodes=$GPUPOOL_MIN_WORKERS:$GPUPOOL_MAX_WORKERS"
        " --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=$GPUPOOL_RDZV_ENDPOINT"
        f" --rdzv-id=$GPUPOOL_RDZV_ID --max-restarts=100 {ELASTIC} --epochs 12 --steps-per-epoch 20"
        " --step-time 0.2 --device cuda"
    )
    job_id = submit(
        gpu_head,
        "--gpus", "1", "--workers", f"1:{most}" if most > 1 else "1", "--checkpoint-dir", str(tmp_path / "ckpt"),
        "--", "bash", "-c", launch,
    )  # fmt: skip
    done = ended(gpu_head, job_id, timeout=300)
    logs = "\n".join(log(gpu_head, job_id, worker) for worker in range(most))
    found = {int(e): (int(w), float(loss)) for e, w, loss in EPOCH_LINE.findall(logs)}
    print(f"job {job_id}: {most} GPU(s); epochs (world, loss):", [found[e] for e in sorted(found)])
    assert done["state"] == "succeeded", logs[-4000:]
    assert "nccl on cuda" in logs, logs[-2000:]
    assert sorted(found) == list(range(1, 13)), logs[-4000:]
    assert found[12][1] < found[1][1] / 4, found
    if most > 1:
        assert max(w for w, _ in found.values()) > 1, "it grew into the other GPUs"

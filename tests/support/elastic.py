"""The elastic example (examples/elastic_train.py) as a gpupool job (issue 35): the guide's launch
line, and reading rank 0's epoch lines from whichever worker was rank 0 (a re-form may move it)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ELASTIC = str(Path(__file__).resolve().parents[2] / "examples" / "elastic_train.py")
EPOCH_LINE = re.compile(r"^epoch (\d+) world (\d+) loss (\S+)$", re.MULTILINE)
# Long enough to outlast a grow and a shrink with room to spare, no longer: whatever is left after
# the last re-form is waiting. On a loaded 2-core machine (2026-11) the grow landed at epoch 4 or 5
# (agents keep training at 1.25 s an epoch until the newcomers reach the rendezvous) and the
# shrink a few epochs later; 20 epochs of 2 s (--step-time 0.4) made the Ray test wait ~30 s at the
# end. By epoch 7 the loss is well under a twentieth of epoch 1's (examples/elastic_train.py alone).
EPOCHS = 16
# The guide's launch line, expanded on the worker by a shell.
LAUNCH = (
    f"exec {sys.executable} -m torch.distributed.run --nnodes=$GPUPOOL_MIN_WORKERS:$GPUPOOL_MAX_WORKERS"
    " --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=$GPUPOOL_RDZV_ENDPOINT --rdzv-id=$GPUPOOL_RDZV_ID"
    f" --max-restarts=100 {ELASTIC} --epochs {EPOCHS} --steps-per-epoch 5 --step-time 0.25 --device cpu"
)


def epochs_of(c: Any, job_id: int, workers: int) -> list[tuple[int, int, float]]:
    """Rank 0's epoch lines, from whichever worker was rank 0 (a re-form may move it), in order."""
    found: dict[int, tuple[int, int, float]] = {}
    for worker in range(workers):
        text = c.logs(job_id, worker=worker).data.decode(errors="replace")
        for epoch, world, loss in EPOCH_LINE.findall(text):
            found[int(epoch)] = (int(epoch), int(world), float(loss))
    return [found[e] for e in sorted(found)]


def wait_for_world(c: Any, job_id: int, world: int, timeout: float = 90, workers: int = 3) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(w == world for _, w, _ in epochs_of(c, job_id, workers)):
            return
        time.sleep(0.5)
    pytest.fail(f"job {job_id} never trained on {world} workers: {epochs_of(c, job_id, workers)}")

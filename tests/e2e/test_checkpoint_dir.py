"""``gpupool submit --checkpoint-dir``: every worker of every attempt is told the directory, a
relative one is taken from the current directory, and gpupool leaves creating it to the job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e

# Each worker notes what it was told; attempt 1 fails (after both workers have written), attempt 2 succeeds.
SCRIPT = (
    'echo "$GPUPOOL_RESTARTS $RANK $GPUPOOL_CHECKPOINT_DIR" >> seen; '
    '[ "$GPUPOOL_RESTARTS" = 1 ] || { sleep 0.5; exit 3; }'
)


def cli(head: HeadProcess, cwd: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "gpupool.cli.main", *args],
        capture_output=True,
        text=True,
        env=head.env(),
        cwd=cwd,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_worker_of_every_attempt_sees_the_checkpoint_dir(head: HeadProcess, tmp_path: Path) -> None:
    out = cli(
        head,
        tmp_path,
        *("submit", "--workers", "2", "--gpus", "1", "--max-restarts", "1", "--checkpoint-dir", "ckpt"),
        *("--", "sh", "-c", SCRIPT),
    )
    job_id = int(out.strip().splitlines()[-1])
    with head.client() as c:
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=30)
    assert (job["state"], job["restarts"]) == ("succeeded", 1)
    ckpt = str(tmp_path.resolve() / "ckpt")
    assert sorted((tmp_path / "seen").read_text().splitlines()) == [f"{a} {r} {ckpt}" for a in (0, 1) for r in (0, 1)]
    assert not (tmp_path / "ckpt").exists()  # the job creates it, if it wants one
    detail = json.loads(cli(head, tmp_path, "show", str(job_id), "-o", "json"))
    assert detail["checkpoint_dir"] == ckpt
    assert "checkpoint dir" in cli(head, tmp_path, "show", str(job_id))

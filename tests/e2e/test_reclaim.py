"""The issue's reclaim scenario on a real head: project A borrows the whole cluster, project B
takes its quota back; A's preempted jobs see SIGTERM, wait, and start again when B's end."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess, wait_for, wait_state

pytestmark = pytest.mark.e2e

TRAIN = textwrap.dedent("""
    import os, signal, sys, time
    out = sys.argv[1]
    job = os.environ["GPUPOOL_JOB_ID"]
    attempt = os.environ["GPUPOOL_RESTARTS"]
    if os.environ.get("GPUPOOL_PREEMPTED") == "1":
        open(f"{out}/resumed-{job}", "w").write(attempt)
    def on_term(signum, frame):
        open(f"{out}/sigterm-{job}-{attempt}", "w").write("checkpointed")
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    open(f"{out}/ready-{job}-{attempt}", "w").write("")
    while not os.path.exists(f"{out}/finish"):
        time.sleep(0.05)
""")


def test_project_below_quota_reclaims_from_a_borrower(head: HeadProcess, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    assert head.cli("project", "set", "a", "--quota", "4").returncode == 0
    assert head.cli("project", "set", "b", "--quota", "4").returncode == 0
    with head.client() as c:
        a_jobs = [
            c.submit(command=[sys.executable, str(script), str(tmp_path)], gpus=1, project="a")["id"] for _ in range(8)
        ]
        for job_id in a_jobs:
            wait_state(c, job_id, ("running",))
            wait_for(lambda j=job_id: (tmp_path / f"ready-{j}-0").exists(), what="the SIGTERM handler")
        b_done = tmp_path / "b-done"
        b_jobs = [
            c.submit(
                command=[
                    sys.executable,
                    "-c",
                    f"import os,time\nwhile not os.path.exists({str(b_done)!r}): time.sleep(0.05)",
                ],
                gpus=1,
                project="b",
            )["id"]
            for _ in range(2)
        ]
        started = time.monotonic()
        for job_id in b_jobs:
            wait_state(c, job_id, ("running",), timeout=20)
        assert time.monotonic() - started < 15, "B waited too long for its quota"

        preempted = wait_for(lambda: [j for j in a_jobs if c.job(j)["state"] == "pending"], what="A's requeued jobs")
        assert len(preempted) == 2
        assert sorted(preempted) == sorted(a_jobs)[-2:], "the most recently started jobs are preempted"
        for job_id in preempted:
            assert (tmp_path / f"sigterm-{job_id}-0").read_text() == "checkpointed"
            job = c.job(job_id)
            kinds = [e["kind"] for e in job["events"]]
            assert "preempt_requested" in kinds and "preempted" in kinds
            assert job["restarts"] == 0 and job["reason_code"] in ("resources", "requeued")
        projects = {p["name"]: p for p in c.projects()}
        assert projects["a"]["allocated"] == 6 and projects["b"]["allocated"] == 2
        assert projects["a"]["borrowed"] == 2 and projects["a"]["pending"] == 2

        b_done.write_text("done")
        for job_id in preempted:
            wait_state(c, job_id, ("running",), timeout=20)
            wait_for(lambda j=job_id: (tmp_path / f"resumed-{j}").exists(), what="GPUPOOL_PREEMPTED=1 on restart")
            assert (tmp_path / f"resumed-{job_id}").read_text() == "1"  # started once before
        (tmp_path / "finish").write_text("now")
        for job_id in a_jobs:
            assert wait_state(c, job_id, ("succeeded", "failed"), timeout=20)["state"] == "succeeded"

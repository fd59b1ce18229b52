"""Cancel kills the whole process tree; a head killed with SIGKILL loses nothing."""

from __future__ import annotations

import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess, pid_alive, wait_for, wait_state

pytestmark = pytest.mark.e2e

TREE = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import subprocess,sys,time; g=subprocess.Popen(['sleep','300']); "
        "open(sys.argv[1]+'/grandchild','w').write(str(g.pid)); time.sleep(300)", sys.argv[1]])
    open(sys.argv[1] + "/child", "w").write(str(child.pid))
    open(sys.argv[1] + "/main", "w").write(str(os.getpid()))
    time.sleep(300)
""")


def test_cancel_kills_the_process_tree(head: HeadProcess, tmp_path: Path) -> None:
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    with head.client() as c:
        job = c.submit(command=[sys.executable, str(script), str(tmp_path)], gpus=1)["id"]
        wait_state(c, job, ("running",))
        wait_for(lambda: (tmp_path / "grandchild").exists(), what="the process tree to start")
        pids = [int((tmp_path / n).read_text()) for n in ("main", "child", "grandchild")]
        assert all(pid_alive(p) for p in pids)
        result = head.cli("cancel", str(job))
        assert result.returncode == 0, result.stderr
        done = wait_state(c, job, ("cancelled",), timeout=15)
    assert done["exit_code"] == 128 + signal.SIGTERM
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=10, what="the whole tree to die")


def test_cancel_escalates_to_sigkill_after_the_grace_period(head: HeadProcess, tmp_path: Path) -> None:
    stubborn = [
        sys.executable,
        "-c",
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(300)",
    ]
    with head.client() as c:
        job = c.submit(command=stubborn, gpus=1)["id"]
        wait_state(c, job, ("running",))
        wait_for(lambda: b"ready" in c.logs(job).data, what="the worker to ignore SIGTERM")
        started = time.monotonic()
        c.cancel(job)
        done = wait_state(c, job, ("cancelled",), timeout=15)
        elapsed = time.monotonic() - started
    assert done["exit_code"] == 128 + signal.SIGKILL
    assert elapsed >= 1.5  # the head runs with --kill-grace 2


def test_cancel_of_a_pending_job_is_immediate_and_of_a_finished_job_is_refused(head: HeadProcess) -> None:
    with head.client() as c:
        blockers = [c.submit(command=["sleep", "30"], gpus=4)["id"] for _ in range(2)]
        waiting = c.submit(command=["true"], gpus=4)["id"]
        assert c.cancel(waiting)["state"] == "cancelled"
        for b in blockers:
            c.cancel(b)
        wait_state(c, blockers[0], ("cancelled",))
    again = head.cli("cancel", str(waiting))
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: job {waiting} already cancelled; nothing to cancel"


def test_sigkill_of_the_head_loses_no_job_and_readopts_running_workers(
    head_factory: type[HeadProcess], tmp_path: Path
) -> None:
    head = head_factory().start()
    gate = tmp_path / "gate"
    wait_gate = f"import os,sys,time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\nsys.exit(0)"
    with head.client() as c:
        survivor = c.submit(command=[sys.executable, "-c", wait_gate], gpus=4)["id"]
        exits_meanwhile = c.submit(
            command=[sys.executable, "-c", "import time,sys; time.sleep(1.5); sys.exit(7)"], gpus=2
        )["id"]
        waiting = c.submit(command=["true"], gpus=4, workers=2)["id"]  # needs both nodes
        wait_state(c, survivor, ("running",))
        wait_state(c, exits_meanwhile, ("running",))
        wait_state(c, waiting, ("pending",))
        pid = c.job(survivor)["placements"]
    code, _ = head.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL
    time.sleep(2.5)  # job 2 exits with 7 while no head is running

    restarted = head_factory(head.data_dir).start()
    with restarted.client() as c:
        jobs = {j["id"]: j for j in c.jobs(include_finished=True)}
        assert set(jobs) == {survivor, exits_meanwhile, waiting}, "a job was lost"
        failed = wait_state(c, exits_meanwhile, ("failed",), timeout=10)
        assert failed["exit_code"] == 7
        assert c.job(survivor)["state"] == "running"
        assert c.job(survivor)["placements"] == pid
        assert c.job(waiting)["state"] == "pending"
        gate.write_text("open")
        assert wait_state(c, survivor, ("succeeded", "failed"), timeout=15)["state"] == "succeeded"
        assert wait_state(c, waiting, ("succeeded", "failed"), timeout=15)["state"] == "succeeded"
        events = [e["message"] for e in c.job(survivor)["events"]]
    assert any("re-adopted" in m for m in events)


def test_sigterm_stops_the_head_cleanly_and_leaves_jobs_running(head: HeadProcess, tmp_path: Path) -> None:
    assert "2 nodes, 8 GPUs (simulated)" in head.ready_line
    assert head.ready_line.startswith(f"gpupool head ready at {head.url}")
    with head.client() as c:
        job = c.submit(command=["sleep", "30"], gpus=1)["id"]
        wait_state(c, job, ("running",))
        (placement,) = c.job(job)["placements"]
    code, out = head.stop(signal.SIGTERM)
    assert code == 0
    assert "Traceback" not in out
    assert "running jobs keep running" in out
    runs = list((head.data_dir / "nodes" / placement["node"] / "runs").rglob("supervisor.pid"))
    assert len(runs) == 1 and pid_alive(int(runs[0].read_text()))


def test_a_second_head_on_the_same_data_dir_is_refused(head: HeadProcess, head_factory: type[HeadProcess]) -> None:
    other = head_factory(head.data_dir)
    result = other.cli("up", "--port", str(other.port), "--data-dir", str(head.data_dir), "--fake-nodes", "1")
    assert result.returncode == 2
    assert "another gpupool head" in result.stderr and result.stderr.count("\n") == 1

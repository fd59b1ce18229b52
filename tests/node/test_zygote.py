"""Supervisors forked from the zygote (issue 16): a launch costs no Python start-up, the forked
supervisor behaves as one started fresh (exit codes, kills, its stderr and pid in the run
directory, liveness that survives pid reuse), and a dead zygote is replaced or bypassed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from gpupool.domain.launch import WorkerExit
from gpupool.node import rundir
from gpupool.node.zygote import Zygote
from tests.support.node_runtime import request, runtime, worker_pid


def zygote_of(rt: object) -> Zygote:
    found = rt._zygote  # type: ignore[attr-defined]
    assert isinstance(found, Zygote)
    return found


def test_a_forked_supervisor_runs_kills_and_reports_like_a_fresh_one(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    try:
        done = rt.launch(request(1, ["sh", "-c", "echo out; echo err >&2; exit 7"]))
        assert _wait(lambda: rt.poll(done)) == WorkerExit(exit_code=7)
        run = Path(done.run_dir)
        log = Path(str(tmp_path / "logs" / "job-1")).glob("*")
        assert any("out" in p.read_text() and "err" in p.read_text() for p in log)
        process = zygote_of(rt)._process
        assert process is not None and process.poll() is None  # the zygote served it
        assert done.pid not in (0, os.getpid()) and rundir.read_pid(run) == done.pid
        assert (run / rundir.STARTED).read_text().strip()

        slow = rt.launch(request(2, ["sleep", "60"], grace_s=1))
        worker_pid(slow)
        pid, slow_run = slow.pid, Path(slow.run_dir)
        assert rundir.supervisor_running(pid, slow_run)
        assert not rundir.supervisor_running(os.getpid(), slow_run)  # another process is not it
        assert rt.poll(slow) is None
        rt.kill(slow)
        assert _wait(lambda: rt.poll(slow)) == WorkerExit(exit_code=128 + signal.SIGTERM)
        assert _wait(lambda: not rundir.supervisor_running(pid, slow_run))

        process.kill()  # a zygote that died is started again at the next launch
        process.wait()
        again = rt.launch(request(3, ["true"]))
        assert _wait(lambda: rt.poll(again)) == WorkerExit(exit_code=0)
        assert zygote_of(rt)._process is not process
    finally:
        rt.close()
    assert process.poll() is not None


def test_without_a_zygote_the_supervisor_is_started_the_old_way(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    zygote_of(rt).spawn = lambda spec_path: None  # type: ignore[method-assign]
    try:
        handle = rt.launch(request(4, ["sh", "-c", "exit 3"]))
        assert _wait(lambda: rt.poll(handle)) == WorkerExit(exit_code=3)
        assert not (Path(handle.run_dir) / rundir.STARTED).exists()
    finally:
        rt.close()


def _wait(check: object, timeout: float = 10) -> object:
    from tests.support.headproc import wait_for as wait

    return wait(check, timeout)  # type: ignore[arg-type]


def test_a_zygote_whose_parent_is_gone_before_it_serves_stops_at_once(tmp_path: Path) -> None:
    """A head killed as it started its zygote: the zygote must not take init for its parent and
    live on (one was found, hours later, holding a socket in a data dir long gone)."""
    import subprocess
    import sys
    import time

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer is
    zygote = subprocess.Popen(
        [sys.executable, "-m", "gpupool.node.zygote", str(tmp_path / "z.sock"), str(gone.pid)], start_new_session=True
    )
    started = time.monotonic()
    assert zygote.wait(timeout=10) == 0
    assert time.monotonic() - started < 5

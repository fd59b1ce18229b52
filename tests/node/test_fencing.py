"""Self-fencing and clean-up of the node runtime, on real processes and without Ray: a worker
whose node lost contact (its lease file goes stale) is stopped by its own supervisor and recorded
as fenced (the head sees it lost); a runtime that starts over a directory with leftovers stops
them; detached supervisors are nobody's child and still report exits."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from gpupool.domain.launch import WorkerExit
from tests.support.headproc import pid_alive, wait_for
from tests.support.node_runtime import request, runtime, supervisor_pid, worker_pid


def test_a_worker_whose_lease_goes_stale_is_fenced_and_seen_lost(tmp_path: Path) -> None:
    rt = runtime(tmp_path, lease_timeout_s=1.0, detach=True)
    rt.renew_lease()
    handle = rt.launch(request(1, [sys.executable, "-c", "import time; time.sleep(60)"]))
    pid = worker_pid(handle)
    renewed_until = time.monotonic() + 1.5
    while time.monotonic() < renewed_until:  # a healthy node: the lease is renewed, the worker runs on
        rt.renew_lease()
        assert rt.poll(handle) is None
        time.sleep(0.2)
    stale_at = time.monotonic()  # contact lost: nobody renews the lease any more
    ended = wait_for(lambda: rt.poll(handle), timeout=10, interval=0.05, what="the fenced exit")
    assert time.monotonic() - stale_at < 1.0 + 0.5 + 0.25 + 1.0  # timeout, check period, short grace, slack
    assert ended == WorkerExit(exit_code=None, lost=True)
    assert not pid_alive(pid)
    record = json.loads((Path(handle.run_dir) / "exit.json").read_text())
    assert record["fenced"] is True
    assert "self-fencing" in rt.read_log(1, 0).decode()


def test_a_worker_is_not_started_on_a_node_whose_lease_is_already_stale(tmp_path: Path) -> None:
    rt = runtime(tmp_path, lease_timeout_s=0.5)
    rt.renew_lease()
    os.utime(rt.lease_path, (time.time() - 60, time.time() - 60))
    marker = tmp_path / "ran"
    handle = rt.launch(request(2, ["touch", str(marker)]))
    assert wait_for(lambda: rt.poll(handle), timeout=10) == WorkerExit(exit_code=None, lost=True)
    assert not marker.exists()


def test_a_runtime_starting_over_leftovers_stops_them(tmp_path: Path) -> None:
    old = runtime(tmp_path, detach=True)
    handle = old.launch(request(3, ["sleep", "60"]))
    pid, supervisor = worker_pid(handle), supervisor_pid(handle)
    new = runtime(tmp_path, detach=True)  # the node came back after it was declared dead
    assert new.clean() == 1
    wait_for(lambda: not pid_alive(pid) and not pid_alive(supervisor), timeout=10, what="leftovers stopped")
    assert new.poll(handle) == WorkerExit(exit_code=None, lost=True)
    assert new.clean() == 0  # what ended stays ended


def test_a_detached_supervisor_is_nobodys_child_and_reports_exits(tmp_path: Path) -> None:
    rt = runtime(tmp_path, detach=True)
    handle = rt.launch(request(4, ["sh", "-c", "exit 7"]))
    assert handle.pid == 0  # not waited for: launching costs no Python start-up
    assert wait_for(lambda: rt.poll(handle), timeout=10) == WorkerExit(exit_code=7)
    handle = rt.launch(request(5, ["sleep", "60"], grace_s=1))
    rt.kill(handle)  # a kill that races the start is not lost
    assert wait_for(lambda: rt.poll(handle), timeout=10) == WorkerExit(exit_code=128 + signal.SIGTERM)
    handle = rt.launch(request(6, ["sleep", "60"], grace_s=1))
    worker_pid(handle)
    supervisor = supervisor_pid(handle)
    ppid = int(Path(f"/proc/{supervisor}/stat").read_text().rsplit(")", 1)[-1].split()[1])
    assert ppid != os.getpid()
    rt.kill(handle)
    assert wait_for(lambda: rt.poll(handle), timeout=10) == WorkerExit(exit_code=128 + signal.SIGTERM)

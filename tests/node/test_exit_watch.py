"""The exit doorbell: a supervisor's ``ring`` wakes the node's ``ExitWatch`` at once, and rings
that nobody hears neither block nor fail (the controller then finds exits by polling)."""

from __future__ import annotations

import threading
from pathlib import Path

from gpupool.node import rundir
from gpupool.node.exit_watch import ExitWatch


def _run_dir(data_dir: Path) -> Path:
    run = data_dir / "runs" / "job-7" / "attempt-1" / "worker-0"
    run.mkdir(parents=True)
    return run


def test_a_ring_wakes_the_watch_and_a_burst_of_rings_is_heard(tmp_path: Path) -> None:
    woken = threading.Event()
    count = []

    def wake() -> None:
        count.append(1)
        woken.set()

    (tmp_path / rundir.EXITS_FIFO).write_text("not a fifo")  # left by something else: replaced
    watch = ExitWatch(tmp_path, wake)
    try:
        run = _run_dir(tmp_path)
        assert not woken.wait(0.2)  # nothing rang yet
        rundir.ring(run)
        assert woken.wait(2.0)
        woken.clear()
        for _ in range(100):
            rundir.ring(run)
        assert woken.wait(2.0)
        assert 2 <= len(count) <= 101
        assert (tmp_path / rundir.EXITS_FIFO).stat().st_mode & 0o777 == 0o600
    finally:
        watch.close()


def test_a_ring_with_nobody_listening_returns_at_once(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    rundir.ring(run)  # no FIFO at all
    watch = ExitWatch(tmp_path, lambda: None)
    watch.close()  # the FIFO stays, with no reader: opening it for writing fails with ENXIO
    rundir.ring(run)

"""Exits heard at once: each supervisor, having recorded its worker's exit, writes a byte into a
FIFO in its node's data directory (``rundir.ring``), and this reader wakes the controller.

Without it an exit waited for the controller's next tick (half a second by default), which set
the pace of short jobs: a GPU freed by a finished job stood idle until then. The FIFO is only a
doorbell -- what happened is still read from the run directory -- so a lost byte (no reader while
the head restarts) costs only that wait. It lives in the node's data directory (0700, the head's),
out of every job's reach.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from gpupool.node import rundir

log = logging.getLogger("gpupool.node")


class ExitWatch:
    """Reads the FIFO of one node data directory in a thread and calls ``wake`` per burst."""

    def __init__(self, data_dir: Path, wake: Callable[[], None]) -> None:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # a node's, made at its first launch otherwise
        path = data_dir / rundir.EXITS_FIFO
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISFIFO(os.lstat(path).st_mode):
                path.unlink()
        with contextlib.suppress(FileExistsError):
            os.mkfifo(path, 0o600)
        # Read and write: the FIFO always has a writer (us), so a read never sees end-of-file.
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self._wake = wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpupool-exits", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.5)
                if not ready:
                    continue
                while os.read(self._fd, 4096):  # drain: one wake for every exit so far
                    pass
            except BlockingIOError:
                pass
            except OSError:
                if self._stop.is_set():
                    return
                log.exception("reading the exit FIFO failed; exits are found by polling meanwhile")
                self._stop.wait(1.0)
                continue
            try:
                self._wake()
            except Exception:
                log.exception("waking the controller for an exit failed")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(OSError):
            os.close(self._fd)

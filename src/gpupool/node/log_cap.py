"""Each worker's log is kept under ``--max-log-size``: one chatty job cannot fill the node's disk.

Checked by the node runtime as it polls a running worker (at most once a second). Past the cap
the log keeps its newest half, behind a line that says how much was cut. The worker writes with
O_APPEND, so it goes on writing at the new end; what it writes in the instant between reading
the tail and cutting the file is lost, which the note's "at least" owns up to.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from gpupool.domain.launch import WorkerHandle
from gpupool.node import rundir

DEFAULT_MAX_LOG_BYTES = 100 * 2**20
CHECK_EVERY_S = 1.0


def cap(path: Path, max_bytes: int) -> int:
    """Cut ``path`` to its newest ``max_bytes // 2`` when it is larger than ``max_bytes``; the
    bytes cut (0: nothing to do)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return 0
    if size <= max_bytes:
        return 0
    keep = max_bytes // 2
    with open(path, "r+b") as f:
        f.seek(size - keep)
        tail = f.read(keep)
        f.seek(0)
        f.truncate()
        cut = size - len(tail)
        note = f"gpupool: this log passed --max-log-size ({max_bytes} bytes): at least its first {cut} bytes were cut\n"
        f.write(note.encode())
        f.write(tail)
    return cut


class LogCap:
    def __init__(
        self, max_bytes: int, every_s: float = CHECK_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_bytes = max_bytes
        self._every_s, self._clock = every_s, clock
        self._checked: dict[str, float] = {}
        self._logs: dict[str, Path] = {}

    def check(self, handle: WorkerHandle, final: bool = False) -> int:
        """Cap the worker's log, at most every ``every_s``; ``final``: its worker ended, so this is
        the last look and it is taken now (what it wrote since the last check is cut too)."""
        run_dir = handle.run_dir
        now = self._clock()
        recent = now - self._checked.get(run_dir, -self._every_s) < self._every_s
        if self.max_bytes <= 0 or (recent and not final):
            return 0
        self._checked[run_dir] = now
        log = self._logs.get(run_dir)
        if log is None:
            with contextlib.suppress(OSError, ValueError, KeyError):
                log = self._logs[run_dir] = Path(rundir.read_spec(Path(run_dir)).log)
        return 0 if log is None else cap(log, self.max_bytes)

    def forget(self, run_dir: str) -> None:
        self._checked.pop(run_dir, None)
        self._logs.pop(run_dir, None)


# Each user's logs together are kept under ``--max-user-logs`` by the head (controller/user_logs.py),
# which asks each node for the size of every job's logs and has it empty the oldest finished ones'.


def job_log_sizes(data_dir: Path) -> dict[int, int]:
    """The bytes of every job's logs under ``data_dir`` (its workers' together)."""
    sizes: dict[int, int] = {}
    with contextlib.suppress(FileNotFoundError), os.scandir(data_dir / "logs") as jobs:
        for job in jobs:
            if not job.name.startswith("job-") or not job.name[4:].isdigit():
                continue
            total = 0
            with contextlib.suppress(OSError), os.scandir(job.path) as logs:
                for log in logs:
                    with contextlib.suppress(OSError):
                        total += log.stat(follow_symlinks=False).st_size
            sizes[int(job.name[4:])] = total
    return sizes


def empty_job_logs(data_dir: Path, job_id: int, note: str) -> int:
    """Replace each of the job's logs by ``note`` (one line: what ``gpupool logs`` shows after);
    the bytes freed."""
    freed = 0
    line = note.rstrip("\n").encode() + b"\n"
    with contextlib.suppress(FileNotFoundError), os.scandir(data_dir / "logs" / f"job-{job_id}") as logs:
        for log in logs:
            if not log.is_file(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError), open(log.path, "r+b") as f:
                size = os.fstat(f.fileno()).st_size
                if size <= len(line):
                    continue
                f.truncate(0)
                f.write(line)
                freed += size - len(line)
    return freed

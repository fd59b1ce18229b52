"""`gpupool down`: stop everything a data dir started — its head, the workers of its nodes, and the
Ray head it started — and nothing else on the machine."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.common import console
from gpupool.domain.errors import Unavailable
from gpupool.settings import default_data_dir

HEAD_STOP_S = 30.0


def down(
    data_dir: Annotated[
        Path | None,
        typer.Option(help="the head's data dir [default: $GPUPOOL_DATA_DIR or $XDG_DATA_HOME/gpupool]"),
    ] = None,
) -> None:
    """Stop the head of a data dir, every worker it left running, and the Ray head it started.
    Running jobs end (the next `gpupool up` requeues them as lost)."""
    from gpupool.head_ray import stop_started  # no Ray import: it finds Ray's processes by their paths
    from gpupool.node.leftovers import stop_leftovers

    where = (data_dir or default_data_dir(dict(os.environ))).resolve()
    if not where.is_dir():
        raise Unavailable(f"no data dir at {where}: nothing to stop", code="no_data_dir")
    head = _stop_head(where / "head.lock")
    workers = sum(
        stop_leftovers(node, "stopped by gpupool down") for node in sorted((where / "nodes").glob("*")) if node.is_dir()
    )
    ray = stop_started(where / "ray") if (where / "ray").is_dir() else 0
    said = [f"head (pid {head}) stopped" if head else "no head was running"]
    said.append(f"{workers} worker(s) stopped" if workers else "no worker was running")
    if ray:
        said.append(f"the Ray head it started stopped ({ray} processes)")
    console.print(f"{where}: " + "; ".join(said))


def _stop_head(lock_path: Path) -> int | None:
    """SIGTERM to the head holding the data dir's lock; wait until it lets go (SIGKILL after 30 s)."""
    if not lock_path.exists():
        return None
    with open(lock_path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            pid = int(lock.read().strip() or 0)
        else:
            return None  # nobody holds it
        if not pid:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + HEAD_STOP_S
        while time.monotonic() < deadline:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return pid
            except BlockingIOError:
                time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return pid

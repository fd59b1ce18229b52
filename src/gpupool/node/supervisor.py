"""The small supervisor that owns one worker process.

Started by the node runtime in a session of its own, so it outlives a head that is killed:
it records the worker's exit status in ``exit.json`` (written atomically) and turns a SIGTERM
into SIGTERM-to-the-worker's-process-group, then SIGKILL after the grace period. A restarted
head reads what it recorded. Standard library only: it starts on every launch, so it must be cheap.

Exit codes follow the shell: 128+N for a worker ended by signal N, 127 when the command does not
exist, 126 when it cannot be run (not executable, missing working directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any


def main(spec_path: str) -> int:
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec_path).parent
    (run_dir / "supervisor.pid").write_text(str(os.getpid()))
    with open(spec["log"], "ab", buffering=0) as log:
        log.write((spec["header"] + "\n").encode())
        code = _run(spec, run_dir, log)
    _write_json(run_dir / "exit.json", {"exit_code": code, "finished_at": datetime.now(UTC).isoformat()})
    return 0


def _run(spec: dict[str, Any], run_dir: Path, log: Any) -> int:
    cwd = spec.get("cwd")
    if cwd and not os.path.isdir(cwd):
        log.write(f"gpupool: working directory {cwd} does not exist on this node\n".encode())
        return 126
    killer = _Killer(float(spec.get("grace_s", 10)))
    if killer.requested:
        return 128 + signal.SIGTERM
    try:
        child = subprocess.Popen(
            spec["argv"],
            env=spec["env"],
            cwd=cwd or None,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_limits(spec.get("cpus") or [], int(spec.get("memory_mib") or 0)),
        )
    except FileNotFoundError:
        log.write(f"gpupool: command not found: {spec['argv'][0]}\n".encode())
        return 127
    except PermissionError as exc:
        log.write(f"gpupool: cannot run {spec['argv'][0]}: {exc.strerror}\n".encode())
        return 126
    killer.attach(child.pid)
    _write_json(run_dir / "child.json", {"pid": child.pid, "pgid": child.pid})
    status = child.wait()
    _kill_group(child.pid, signal.SIGKILL)  # leftovers in the worker's group die with it
    return 128 - status if status < 0 else status


def _limits(cpus: list[int], memory_mib: int) -> Any:
    def apply() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if memory_mib:
            # RLIMIT_DATA, not RLIMIT_AS: CUDA reserves large virtual ranges it never touches.
            limit = memory_mib * 2**20
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    return apply


class _Killer:
    """SIGTERM to the supervisor: SIGTERM to the worker's group, SIGKILL after the grace period.

    Installed before the worker starts, so a kill that races the launch is never lost."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = max(grace_s, 0.01)
        self.pgid: int | None = None
        self.requested = False
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGALRM, self._on_alarm)

    def attach(self, pgid: int) -> None:
        self.pgid = pgid
        if self.requested:
            self._on_term(-1, None)

    def _on_term(self, _signum: int, _frame: FrameType | None) -> None:
        first = not self.requested
        self.requested = True
        if self.pgid is not None and (first or _signum == -1):
            _kill_group(self.pgid, signal.SIGTERM)
            signal.setitimer(signal.ITIMER_REAL, self.grace_s)

    def _on_alarm(self, _signum: int, _frame: FrameType | None) -> None:
        if self.pgid is not None:
            _kill_group(self.pgid, signal.SIGKILL)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.exit(main(sys.argv[1]))

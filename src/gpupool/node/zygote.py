"""Supervisors forked from a warm process instead of started as new Pythons.

Starting ``python -m gpupool.node.supervisor`` costs an interpreter start and the supervisor's
imports: 60-140 ms of CPU on a small machine, most of what lies between a job's start decision
and its process running, and the ceiling on how many short jobs a node turns over per second.
The node runtime starts this process once (``python -m gpupool.node.zygote SOCKET PID``); it imports
the supervisor and then, per launch, reads a spec path from its Unix socket and forks: the child
becomes a supervisor exactly as one started fresh would be (its own session, stdin and stdout on
/dev/null, stderr in the run directory, its pid in the run directory) and runs
``supervisor.main``. A fork of this small single-threaded process takes about a millisecond.

The socket lives in the node's data directory (0700, the head's own): only the runtime can ask for
a supervisor. The zygote ends when the process that started it does. Whatever goes wrong here,
the runtime falls back to starting the supervisor the old way (``Zygote.spawn`` returns None).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path

from gpupool.node import rundir, supervisor

SOCKET = "zygote.sock"


class Zygote:
    """The runtime's side: start the zygote on first use, ask it for supervisors."""

    def __init__(self, data_dir: Path, python: str, env: dict[str, str]) -> None:
        self._path = data_dir / SOCKET
        self._python, self._env = python, env
        self._process: subprocess.Popen[bytes] | None = None

    def spawn(self, spec_path: Path) -> int | None:
        """The pid of a new supervisor of ``spec_path``, or None (start one the old way)."""
        try:
            self._ensure()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(5)
                conn.connect(str(self._path))
                conn.sendall(str(spec_path).encode() + b"\n")
                answer = conn.recv(64)
            return int(answer) if answer.strip().isdigit() else None
        except (OSError, ValueError):
            return None

    def _ensure(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        err = os.open(self._path.parent / "zygote.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self._process = subprocess.Popen(
                [self._python, "-m", "gpupool.node.zygote", str(self._path), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                close_fds=True,
                env=self._env,
            )
        finally:
            os.close(err)
        # A runtime dropped without close() still takes its zygote down with it.
        weakref.finalize(self, _stop, self._process)
        deadline = time.monotonic() + 10
        while not self._path.exists():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise OSError("the zygote did not start")
            time.sleep(0.01)

    def close(self) -> None:
        if self._process is not None:
            _stop(self._process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def serve(path: str, parent: int | None = None) -> None:
    """The zygote: fork a supervisor per request until the process that started it (``parent``)
    is gone. Named, not read with ``getppid`` here: a parent killed before this line ran would be
    taken for init, and the zygote would outlive it for good."""
    parent = os.getppid() if parent is None else parent
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    old = os.umask(0o077)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    os.umask(old)
    os.chmod(path + ".new", 0o600)
    listener.listen(64)
    listener.settimeout(1.0)
    os.replace(path + ".new", path)  # ready: the runtime waits for the name
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(5)
            try:
                spec = conn.recv(4096).decode().strip()
                pid = os.fork()
            except OSError:
                continue
            if pid == 0:
                listener.close()
                conn.close()
                _become_supervisor(spec)
            with contextlib.suppress(OSError):  # its identity is on disk before the runtime hears the pid
                run = Path(spec).parent
                (run / rundir.STARTED).write_text(rundir.started_at(pid) or "")
                rundir.write_pid(run, pid)
                conn.sendall(str(pid).encode())


def _become_supervisor(spec: str) -> None:
    """In the forked child: what a freshly started supervisor has, then its life. Never returns."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # it waits for its worker
        run = Path(spec).parent
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(run / rundir.SUPERVISOR_ERR, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(null)
        os.close(err)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams, never closed
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        code = supervisor.main(spec)
    except BaseException:  # anything at all: it must end here, never go back to the loop
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)

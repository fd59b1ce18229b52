"""A real head in a subprocess, on a free port, with its own data dir; and the CLI against it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpupool.client import GpupoolClient
from gpupool.node.leftovers import stop_leftovers

TERMINAL = ("succeeded", "failed", "cancelled")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HeadProcess:
    def __init__(
        self,
        data_dir: Path,
        *,
        nodes: int | None = 2,
        gpus: int = 4,
        extra: list[str] | None = None,
        extra_env: dict[str, str] | None = None,
        gateway: bool = False,
        real: bool = False,
    ) -> None:
        """``real``: the machine's own GPUs through NVML, no --fake-* at all (tests/gpu).
        ``nodes=None``: no --fake-nodes (the Ray backend, whose nodes join). ``extra_env``: more
        variables in the head's environment (and the CLI's). ``gateway``: start the head's gateway
        on any free port (``gateway_url``); without it none, so heads side by side never fight
        over the default port and tests that need none pay for none."""
        self.data_dir = data_dir
        self.extra_env = dict(extra_env or {})
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [
            *(["--fake-nodes", str(nodes)] if nodes is not None and not real else []),
            *(["--fake-gpus", str(gpus)] if not real else []),
            "--interval",
            "0.1",
            "--kill-grace",
            "2",
            "--restart-backoff",  # short: tests of restarts wait for them; test_restart_backoff.py uses its own
            "0.2s",
            *(["--gateway-port", "0"] if gateway else ["--no-gateway"]),
            *(extra or []),
        ]
        self.gateway = gateway
        self.gateway_url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.ready_line = ""
        self.output: list[str] = []
        self._drain: threading.Thread | None = None

    def _read_rest(self, proc: subprocess.Popen[str]) -> None:
        """Keep reading the head's output so a full pipe never blocks it."""
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output.append(line)

    def start(self, timeout: float = 30) -> HeadProcess:
        cmd = [
            sys.executable,
            "-m",
            "gpupool.cli.main",
            "up",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            *self.args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env(), start_new_session=True
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        # A restart waits for this process's own ready line, not the one an earlier start printed.
        self.ready_line, self.gateway_url = "", ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                said = "".join(self.output[-20:])
                raise RuntimeError(f"head exited early with {self.proc.wait()}: {said}")
            self.output.append(line)
            if line.startswith("gateway: "):
                self.gateway_url = line.split()[1]
            if line.startswith("gpupool head ready"):
                self.ready_line = line.strip()
            if self.ready_line and (self.gateway_url or not self.gateway):
                self._drain = threading.Thread(target=self._read_rest, args=(self.proc,), daemon=True)
                self._drain.start()
                return self
        raise TimeoutError("head did not become ready")

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"GPUPOOL_URL": self.url, "GPUPOOL_DATA_DIR": str(self.data_dir), "PYTHONUNBUFFERED": "1"})
        # No credentials saved by `gpupool login` on this machine may stand in for the admin token.
        env["XDG_CONFIG_HOME"] = str(self.data_dir.parent / "config")
        env.pop("GPUPOOL_TOKEN", None)
        env.update(self.extra_env)
        return env

    def token(self) -> str:
        return (self.data_dir / "admin-token").read_text().strip()

    def client(self) -> GpupoolClient:
        return GpupoolClient(self.url, self.token())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> tuple[int, str]:
        """Signal the head, wait for it, and return its exit code and everything it printed."""
        assert self.proc is not None
        proc, self.proc = self.proc, None
        proc.send_signal(sig)
        code = proc.wait(timeout=timeout)
        if self._drain is not None:
            self._drain.join(timeout=5)
        assert proc.stdout is not None
        proc.stdout.close()
        return code, "".join(self.output)

    def kill_everything(self) -> None:
        """Stop the head and every supervisor and worker it left, whatever state the test left."""
        if self.proc is not None:
            self.stop(signal.SIGKILL)
        marker = str(self.data_dir).encode()
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes()
                environ = (pid_dir / "environ").read_bytes()
            except OSError:
                continue
            if marker in cmdline or marker in environ:
                with contextlib.suppress(OSError):
                    os.killpg(int(pid_dir.name), signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(int(pid_dir.name), signal.SIGKILL)
        # Workers no longer carry the data dir in their environment (only an allow-list of it
        # passes): what their supervisors recorded finds them, their process groups and cgroups.
        for node in sorted((self.data_dir / "nodes").glob("*")):
            if node.is_dir():
                stop_leftovers(node, "stopped by the test's cleanup")

    def cli(
        self, *args: str, timeout: float = 60, input: str | None = None, token: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``gpupool ARGS`` against this head, as its admin or with ``token``."""
        env = self.env() if token is None else {**self.env(), "GPUPOOL_TOKEN": token}
        return subprocess.run(
            [sys.executable, "-m", "gpupool.cli.main", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            input=input,
        )


def wait_for(predicate: Callable[[], Any], timeout: float = 20, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)


def wait_state(client: GpupoolClient, job_id: int, states: tuple[str, ...], timeout: float = 20) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job = client.job(job_id)
        return job if job["state"] in states else None

    return dict(wait_for(check, timeout, what=f"job {job_id} to be {'/'.join(states)}"))


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"

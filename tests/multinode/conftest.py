"""A real Ray cluster on this machine, shared by a module: a gpupool head that starts the Ray
head (no GPUs of its own) and two nodes that join it with ``gpupool join``, two simulated GPUs
each. Joins run in process groups of their own, so a test can crash a node with SIGKILL."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess, wait_for

if importlib.util.find_spec("ray") is None:
    pytest.skip("the Ray backend tests need Ray: pip install -e '.[test]'", allow_module_level=True)

NODE_TIMEOUT = "6s"


class Join:
    def __init__(self, head: HeadProcess, base: Path, name: str, gpus: int = 2) -> None:
        self.head, self.name, self.gpus = head, name, gpus
        self.data_dir = base / name
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> Join:
        cmd = [
            sys.executable,
            "-m",
            "gpupool.cli.main",
            "join",
            self.head.url,
            "--token-file",
            str(self.head.data_dir / "join-token"),
            "--name",
            self.name,
            "--num-gpus",
            str(self.gpus),
            "--num-cpus",
            "1",
            "--data-dir",
            str(self.data_dir),
        ]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.data_dir / "join.out", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_up()
        return self

    def wait_up(self) -> None:
        wait_for(lambda: self.state() == "up", timeout=90, interval=0.2, what=f"node {self.name} to be up")

    def state(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"gpupool join {self.name} exited: {(self.data_dir / 'join.out').read_text()}")
        with self.head.client() as c:
            return next((n["state"] for n in c.nodes() if n["name"] == self.name), None)

    def crash(self) -> None:
        """SIGKILL the node's whole process group: join, Ray's raylet and its actors."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def freeze(self) -> None:
        """SIGSTOP the node's process group (join, raylet, actor): a hung machine, as Ray sees it.
        The workers' supervisors run in sessions of their own and keep running, like processes
        on a machine cut off from the network."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc = None


class RayCluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.head = HeadProcess(
            base / "head",
            nodes=None,
            gpus=0,
            extra=["--backend", "ray", "--node-name", "head", "--placement", "spread", "--node-timeout", NODE_TIMEOUT],
            gateway=True,  # issue 17: services on joined nodes, reached through the head's gateway
        )
        self.nodes: dict[str, Join] = {}

    def start(self) -> RayCluster:
        self.head.start(timeout=120)
        # Both join at once, as a cluster's machines come up side by side (one after the other took
        # ~5 s more: a join is mostly waiting for its raylet to register).
        for name in ("w1", "w2"):
            self.nodes[name] = Join(self.head, self.base, name).start(wait=False)
        for node in self.nodes.values():
            node.wait_up()
        return self

    def join(self, name: str) -> Join:
        self.nodes[name] = Join(self.head, self.base, name).start()
        return self.nodes[name]

    def stop(self) -> None:
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.stop()
        self.head.kill_everything()  # the head, and every Ray process: their environment names its data dir
        marker = str(self.base).encode()
        for pid_dir in Path("/proc").iterdir():
            if pid_dir.name.isdigit() and int(pid_dir.name) != os.getpid():
                with contextlib.suppress(OSError):
                    if marker in (pid_dir / "environ").read_bytes() or marker in (pid_dir / "cmdline").read_bytes():
                        os.kill(int(pid_dir.name), signal.SIGKILL)
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    # A short base path: Ray's Unix sockets live under paths derived from it.
    base = Path(tempfile.mkdtemp(prefix="gp-ray-"))
    made = RayCluster(base)
    try:
        yield made.start()
    finally:
        made.stop()

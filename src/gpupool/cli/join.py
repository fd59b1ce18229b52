"""``gpupool join HEAD_URL``: make this machine a node of the head's Ray cluster.

It needs one address, the head's, and the join token (from ``--token-file`` or
``GPUPOOL_JOIN_TOKEN``, never the command line where ``ps`` would show it). The head answers
with the Ray address and Ray token; ``join`` keeps the token in a 0600 file and runs a Ray
worker node in the foreground as its child, in its process group (a shell started it in a group of
its own): SIGTERM (or Ctrl-C) takes the node out cleanly, stopping the workers it ran; SIGKILL of
the process group is a node crash, which the head detects and whose workers stop themselves
(self-fencing). The Ray token lets its holder run code on every node: the join token that buys it
is as precious as the admin token, and over a network the head's URL should be https.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from gpupool.cli.common import console, err_console
from gpupool.client import GpupoolClient
from gpupool.domain.errors import InvalidInput
from gpupool.executors.ray_processes import NodeOptions, auth_env, check_name, worker_command, write_secret
from gpupool.node.private import private_dir
from gpupool.settings import default_data_dir


def _join_token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise InvalidInput(f"cannot read --token-file {token_file}: {exc.strerror}") from None
    else:
        token = os.environ.get("GPUPOOL_JOIN_TOKEN", "").strip()
    if not token:
        raise InvalidInput(
            "no join token: pass --token-file FILE (a copy of the head's data-dir file join-token) "
            "or set GPUPOOL_JOIN_TOKEN"
        )
    return token


def join(
    head_url: Annotated[str, typer.Argument(help="the head's URL, e.g. http://head-host:7070")],
    token_file: Annotated[
        Path | None, typer.Option(help="file holding the join token [default: $GPUPOOL_JOIN_TOKEN]")
    ] = None,
    num_gpus: Annotated[
        int | None, typer.Option(help="simulate this many GPUs when the machine has none [default: real GPUs]", min=0)
    ] = None,
    name: Annotated[str | None, typer.Option(help="node name [default: hostname]")] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs Ray may count on this node", min=0)] = None,
    gpu_model: Annotated[str | None, typer.Option(help="model name of simulated GPUs")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="logs and run state of this node [default: <gpupool data dir>/nodes/NAME]")
    ] = None,
) -> None:
    """Join this machine to a head's cluster (Ray backend) and serve it until stopped."""
    node = check_name(name or socket.gethostname().split(".")[0])
    token = _join_token(token_file)
    if head_url.startswith("http://") and not head_url.startswith(("http://127.", "http://localhost")):
        err_console.print("warning: the join token and the Ray token cross the network unencrypted; prefer https")
    with GpupoolClient(head_url, token) as c:
        answer = c.join(node)
    node_dir = (data_dir or default_data_dir(dict(os.environ)) / "nodes" / node).resolve()
    token_path = node_dir / "ray-token"
    write_secret(token_path, answer["ray_token"])
    options = NodeOptions(
        name=node,
        data_dir=node_dir,
        num_gpus=num_gpus,
        num_cpus=num_cpus,
        gpu_model=gpu_model,
        node_timeout_s=float(answer["node_timeout_s"]),
    )
    env = auth_env(token_path)
    env.update(options.env())
    log_path = node_dir / "ray-node.log"
    start = log_path.stat().st_size if log_path.exists() else 0
    with _one_start_at_a_time(), open(log_path, "ab") as log:
        child = subprocess.Popen(
            worker_command(answer["ray_address"], options),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _wait_started(child, log_path, start)
    stopping = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    gpus = f"{num_gpus} simulated GPUs" if num_gpus is not None else "its GPUs"
    console.print(
        f"node {node} joined the cluster of {head_url} (Ray at {answer['ray_address']}) with {gpus}; "
        f"logs in {node_dir}. Ctrl-C or SIGTERM takes it out.",
    )
    sys.stdout.flush()
    code = child.wait()
    stopped = _stop_workers(node_dir)
    if stopping:
        console.print(f"node {node} left the cluster; {stopped} workers stopped")
        return
    err_console.print(f"error: the Ray node process exited with code {code}; see {log_path}")
    raise typer.Exit(1)


@contextlib.contextmanager
def _one_start_at_a_time() -> Iterator[None]:
    """Several joins on one machine start their Ray nodes one after the other: a raylet binds ports
    of its own choosing while it starts, and two starting together can pick the same one."""
    # In the user's own gpupool directory (0700), not a name in the shared /tmp that another
    # account could make first.
    lock_path = private_dir(default_data_dir(dict(os.environ))) / "join.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _wait_started(child: subprocess.Popen[bytes], log_path: Path, offset: int, timeout_s: float = 180) -> None:
    """Until ``ray start --block`` says the node is up (or gives up), so the next join may start."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.poll() is None:
        with open(log_path, "rb") as f:
            f.seek(offset)
            if b"block forever" in f.read():
                return
        time.sleep(0.2)


def _stop_workers(node_dir: Path) -> int:
    """The node is leaving: its workers stop now rather than when their lease runs out."""
    from gpupool.node.leftovers import stop_leftovers

    return stop_leftovers(node_dir, "stopped as the node left the cluster")

"""Assemble the Ray backend for the head: find or start the Ray head, keep Ray's token 0600 in
the data dir, connect. ``import ray`` happens only inside ``executors/ray.py``, loaded here
lazily, so the local backend never pays for Ray."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from gpupool.domain.errors import InvalidInput
from gpupool.executors.base import Executor
from gpupool.executors.ray_processes import (
    NodeOptions,
    auth_env,
    check_name,
    open_ports,
    ray_temp_dir,
    start_head,
    write_secret,
)
from gpupool.settings import Settings
from gpupool.usecases.context import RayCluster

log = logging.getLogger("gpupool.head")


@dataclass(frozen=True, slots=True)
class RayBackend:
    executor: Executor
    cluster: RayCluster
    started_ray: bool
    exposed: list[str]


def build(settings: Settings) -> RayBackend:
    ray_dir = settings.data_dir / "ray"
    token_path = ray_dir / "auth_token"
    started = False
    if settings.ray_address:
        address = settings.ray_address
        write_secret(token_path, _existing_ray_token())
    else:
        address = _running_head(ray_dir) or ""
        if not address:
            name = check_name(settings.node_name or socket.gethostname().split(".")[0])
            options = NodeOptions(
                name=name,
                data_dir=settings.data_dir / "nodes" / name,
                num_gpus=settings.fake_gpus,
                num_cpus=None,
                gpu_model=settings.fake_gpu_model,
                node_timeout_s=settings.node_timeout_s,
            )
            address = start_head(ray_dir=ray_dir, host=settings.host, options=options, log=ray_dir / "ray-start.log")
            started = True
    # ray.init in this process reads these; the jobs never see them (the node runtime drops RAY_*).
    os.environ.update(auth_env(token_path, {}))
    from gpupool.executors.ray import RayExecutor  # the only place Ray is imported

    executor = RayExecutor(address, node_timeout_s=settings.node_timeout_s)
    token = token_path.read_text().strip()
    return RayBackend(
        executor=executor,
        cluster=RayCluster(address=address, token=token, node_timeout_s=settings.node_timeout_s),
        started_ray=started,
        exposed=open_ports(_ray_pids(ray_dir)) if started else [],
    )


def _existing_ray_token() -> str:
    """The token of a Ray cluster the admin started: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or Ray's default file."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return path.read_text().strip()
    except OSError:
        raise InvalidInput(
            f"--ray-address needs that cluster's token: set RAY_AUTH_TOKEN_PATH (no token at {path})"
        ) from None


def _running_head(ray_dir: Path) -> str | None:
    """The Ray head a previous run of this head started, if it still answers."""
    try:
        address = (ray_dir / "address").read_text().strip()
    except OSError:
        return None
    host, _, port = address.rpartition(":")
    with contextlib.suppress(OSError, ValueError), socket.create_connection((host, int(port)), timeout=1):
        return address
    return None


def _ray_pids(ray_dir: Path) -> set[int]:
    """Processes of the Ray session under this data dir (GCS, raylet, agents)."""
    pids = set()
    marker = str(ray_temp_dir(ray_dir)).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes():
                    pids.add(int(entry.name))
    return pids


def describe_exposure(exposed: list[str]) -> str:
    if not exposed:
        return ""
    return (
        "Ray listens beyond loopback on "
        + ", ".join(exposed)
        + " (Ray cannot bind its GCS and raylet to one address); every Ray port requires the Ray token,"
        " but firewall them if this machine is reachable from untrusted networks"
    )


def stop_started(ray_dir: Path, timeout_s: float = 15.0) -> int:
    """Stop the Ray processes of the session this data dir started (found by its temp dir in their
    command lines), never another Ray on the machine (``ray stop`` would stop every one): SIGTERM,
    then SIGKILL what is left after ``timeout_s``. Returns how many there were.

    The GCS server goes last: SIGTERMed together with the others, the raylet and the autoscaler's
    monitor kept trying to reach it while it waited for them, and all three stayed up until the
    SIGKILL (15 s; one by one they all end within a second or two, Ray 2.60)."""
    pids = _ray_pids(ray_dir)
    gcs = {p for p in pids if _is_gcs(p)}
    deadline = time.monotonic() + timeout_s
    for group in (pids - gcs, gcs):
        for pid in group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        while {p for p in group if _alive(p)} and time.monotonic() < deadline:
            time.sleep(0.1)
    for pid in {p for p in pids if _alive(p)}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        (ray_dir / "address").unlink()
    return len(pids)


def _is_gcs(pid: int) -> bool:
    try:
        program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return program.endswith(b"gcs_server")


def after_head(ray_dir: Path, jobs_running: int) -> str:
    """What becomes of the Ray head this data dir started when the gpupool head stops: stopped
    when no job runs on it, else kept for them, and said so."""
    if jobs_running:
        return (
            f"the Ray cluster this head started keeps running for {jobs_running} running worker(s);"
            f" `gpupool down --data-dir {ray_dir.parent}` stops it and them"
        )
    stopped = stop_started(ray_dir)
    return f"stopped the Ray head this head started ({stopped} processes)" if stopped else ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"

"""Ray's own processes, started through the ``ray`` command: the Ray head a gpupool head runs
when no Ray address is given, and the worker node ``gpupool join`` keeps in the foreground.

No ``import ray`` here: Ray is driven as a program, so its processes outlive the gpupool head
(a restarted head re-attaches to the same Ray cluster) and a node's processes die with the
``join`` process group that owns them.

Security, as Ray 2.6x behaves (checked on this kind of machine): token authentication is turned on
explicitly with ``RAY_AUTH_MODE=token`` and a token that gpupool generates and keeps in a 0600 file
named by ``RAY_AUTH_TOKEN_PATH`` (Ray's own ``~/.ray/auth_token`` is written 0644); Ray's
dashboard and its job API are not started (``--include-dashboard=false``); the Ray client server
listens on a port of its own and, like every Ray port, needs the token. Ray's GCS and raylet
still listen on all interfaces whatever ``--node-ip-address`` says, so every Ray port refuses
callers without the token, and ``open_ports`` reports which of them are reachable from beyond
loopback, for the head to warn about.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpupool.domain.errors import InvalidInput, Unavailable

NAME_LABEL = "gpupool-name"
DATA_DIR_ENV = "GPUPOOL_NODE_DATA_DIR"
GPUS_ENV = "GPUPOOL_NODE_GPUS"
MODEL_ENV = "GPUPOOL_NODE_GPU_MODEL"
TIMEOUT_ENV = "GPUPOOL_NODE_TIMEOUT"


def ray_program() -> str:
    """The ``ray`` next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise Unavailable("the Ray backend needs Ray: pip install 'gpupool[ray]'", code="ray_missing")
    return found


def write_secret(path: Path, value: str) -> None:
    """Write a token 0600 from its first byte: a new file, renamed over the old one, so a looser
    mode on an existing file never shows the new secret."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)
    os.replace(tmp, path)


def ensure_ray_token(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_hex(32)
    write_secret(path, token)
    return token


def auth_env(token_path: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.pop("RAY_AUTH_TOKEN", None)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_path), RAY_USAGE_STATS_ENABLED="0")
    return env


def health_env(node_timeout_s: float) -> dict[str, str]:
    """Ray's failure detector tuned so a silent node is declared dead within about the timeout
    (Ray's default is about 15 s for a killed node and about 65 s for a frozen one)."""
    period_ms = max(200, int(node_timeout_s * 1000 / 5))
    return {
        "RAY_health_check_initial_delay_ms": "0",
        "RAY_health_check_period_ms": str(period_ms),
        "RAY_health_check_timeout_ms": str(period_ms),
        "RAY_health_check_failure_threshold": "4",
    }


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Distinct free ports: every socket stays open until all are chosen, so none repeats."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


@dataclass(frozen=True, slots=True)
class NodeOptions:
    """What a Ray node of gpupool's is started with; several may share one machine."""

    name: str
    data_dir: Path
    num_gpus: int | None
    num_cpus: int | None
    gpu_model: str | None
    node_timeout_s: float

    def env(self) -> dict[str, str]:
        env = {
            DATA_DIR_ENV: str(self.data_dir),
            TIMEOUT_ENV: str(self.node_timeout_s),
            # Workers' supervisors are detached anyway; this keeps Ray from hunting them too.
            "RAY_kill_child_processes_on_worker_exit": "false",
            # A leaving node stops at once: its actor never "drains", and gpupool requeues its jobs.
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        }
        if self.num_gpus is not None:
            env[GPUS_ENV] = str(self.num_gpus)
        if self.gpu_model:
            env[MODEL_ENV] = self.gpu_model
        return env

    def args(self) -> list[str]:
        """Ports of their own (several nodes on one machine must not collide)."""
        nm, om, agent, agent_grpc, metrics, runtime_env = free_ports(6)
        args = [
            f"--labels={NAME_LABEL}={self.name}",
            "--disable-usage-stats",
            "--min-worker-port=0",
            "--max-worker-port=0",
            f"--node-manager-port={nm}",
            f"--object-manager-port={om}",
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={runtime_env}",
        ]
        if self.num_gpus is not None:
            args.append(f"--num-gpus={self.num_gpus}")
        if self.num_cpus is not None:
            args.append(f"--num-cpus={self.num_cpus}")
        return args


def check_name(name: str) -> str:
    if not name or len(name) > 63 or not all(c.isalnum() or c in "-_." for c in name) or not name[0].isalnum():
        raise InvalidInput(f"node name {name!r}: use 1-63 letters, digits, '-', '_' or '.', starting with a letter")
    return name


SESSION_RECORD = "temp-dir"  # in the gpupool data dir's ray folder: where its Ray session lives


def ray_temp_dir(ray_dir: Path, *, make: bool = False) -> Path:
    """Ray's session directory for ``ray_dir``, kept short (Ray's Unix socket paths inside it must
    stay under 107 bytes, which a deep data dir would exceed) and private: jobs run as other
    accounts on this machine. Ray makes its own directory world-writable (0777), so it lives inside
    one of ours, made 0700 under a name nobody can guess, never at a path another user could make
    first (``mkdtemp``). That one's path is recorded in ``ray_dir`` for the next start and for
    finding the session's processes. ``make``: a new one unless the recorded one is still ours;
    else the recorded one (a path nothing lives at when there is none)."""
    record = ray_dir / SESSION_RECORD
    try:
        found: Path | None = Path(record.read_text().strip())
    except OSError:
        found = None
    if found is not None and (not make or _private_to_me(found)):
        return found / "ray"
    if not make:
        return ray_dir / "no-ray-session"
    made = Path(tempfile.mkdtemp(prefix="gpupool-ray-"))  # 0700, O_EXCL under a random name
    write_secret(record, str(made))
    return made / "ray"


def _private_to_me(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def start_head(*, ray_dir: Path, host: str, options: NodeOptions, log: Path) -> str:
    """Start a Ray head that outlives this process; returns its GCS address."""
    token_path = ray_dir / "auth_token"
    ensure_ray_token(token_path)
    port, client_port = free_ports(2)
    # With its client extras installed Ray starts a Ray Client server, on the fixed port 10001
    # unless told otherwise (two heads on one machine would collide); minimal Ray refuses the flag.
    client = [f"--ray-client-server-port={client_port}"] if importlib.util.find_spec("grpc") else []
    env = auth_env(token_path)
    env.update(health_env(options.node_timeout_s))
    env.update(options.env())
    cmd = [
        ray_program(),
        "start",
        "--head",
        f"--port={port}",
        f"--node-ip-address={host}",
        "--include-dashboard=false",
        *client,
        f"--temp-dir={ray_temp_dir(ray_dir, make=True)}",
        *options.args(),
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise Unavailable(f"could not start a Ray head (exit {done.returncode}); see {log}", code="ray_failed")
    try:  # the address Ray chose to advertise (it replaces loopback by the machine's address)
        address = (ray_temp_dir(ray_dir) / "ray_current_cluster").read_text().strip()
    except OSError:
        address = f"{_node_ip(host)}:{port}"
    (ray_dir / "address").write_text(address)
    return address


def stop_head(ray_dir: Path) -> None:
    """Stop the Ray processes this machine runs (``ray stop``), for `gpupool down`-like cleanup."""
    with contextlib.suppress(OSError):
        subprocess.run(
            [ray_program(), "stop", "--force"],
            env=auth_env(ray_dir / "auth_token"),
            capture_output=True,
            check=False,
            timeout=60,
        )


def worker_command(address: str, options: NodeOptions) -> list[str]:
    """A Ray worker node, with a session directory of its own as private as the head's."""
    temp = ray_temp_dir(options.data_dir, make=True)
    return [ray_program(), "start", f"--address={address}", "--block", f"--temp-dir={temp}", *options.args()]


def _node_ip(host: str) -> str:
    """The address Ray advertises: it replaces loopback by the machine's own address."""
    if host in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, contextlib.suppress(OSError):
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            return str(s.getsockname()[0])
        return "127.0.0.1"
    return host


def open_ports(pids: set[int]) -> list[str]:
    """Listening TCP sockets of these processes that are not bound to loopback."""
    inodes: dict[str, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes[target[8:-1]] = pid
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state != "0A" or inode not in inodes:  # 0A: LISTEN
                    continue
                addr, port = local.split(":")
                if addr in ("0100007F", "00000000000000000000000001000000"):
                    continue
                found.append(f"port {int(port, 16)}")
    return sorted(set(found))

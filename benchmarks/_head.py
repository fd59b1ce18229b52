"""Start a throw-away gpupool head for a benchmark, and clean up after it.

``running_head()`` starts ``gpupool up`` as a subprocess on a free port with a fresh temporary
data dir and a fake cluster, waits for its "gpupool head ready at ..." line, and yields the URL,
the admin token and the paths. On exit it stops the head with SIGTERM (SIGKILL if it does not
stop), then kills what is left of the jobs: workers run under supervisors in sessions of their
own and outlive the head by design, so every process whose command line names the temporary
directory (the supervisors) and every worker process group they recorded is killed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

READY_PREFIX = "gpupool head ready at "


@dataclass
class RunningHead:
    url: str
    token: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[str]
    stdout_lines: list[str] = field(default_factory=list)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def gpupool_command() -> list[str]:
    """The ``gpupool`` entry point next to this interpreter, else ``python -m gpupool.cli.main``."""
    script = Path(sys.executable).parent / "gpupool"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gpupool.cli.main"]


@contextlib.contextmanager
def running_head(
    *,
    nodes: int | None = 4,
    gpus: int = 8,
    interval: float = 0.5,
    kill_grace: float = 1.0,
    extra_args: Sequence[str] = (),
    ready_timeout: float = 60.0,
) -> Iterator[RunningHead]:
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-bench-"))
    data_dir = tmp / "data"
    log_path = tmp / "head.stderr"
    port = free_port()
    argv = [
        *gpupool_command(),
        "up",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        *(["--fake-nodes", str(nodes)] if nodes is not None else []),
        "--fake-gpus",
        str(gpus),
        "--interval",
        str(interval),
        "--kill-grace",
        str(kill_grace),
        # no gateway unless the benchmark asks for one (--gateway-port 0): never a fight over 7071
        *([] if any(a.startswith("--gateway") for a in extra_args) else ["--no-gateway"]),
        *extra_args,
    ]
    env = dict(os.environ)
    for private in ("GPUPOOL_TOKEN", "GPUPOOL_URL", "GPUPOOL_DATA_DIR"):
        env.pop(private, None)
    stderr = open(log_path, "w")  # noqa: SIM115 - closed in the finally below
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True, env=env, bufsize=1
    )
    head: RunningHead | None = None
    try:
        lines: queue.Queue[str | None] = queue.Queue()
        seen: list[str] = []
        threading.Thread(target=_pump, args=(process, lines, seen), daemon=True).start()
        url = _wait_ready(process, lines, ready_timeout, log_path)
        token = (data_dir / "admin-token").read_text().strip()
        head = RunningHead(url, token, data_dir, log_path, process, seen)
        yield head
    finally:
        _stop(process)
        stderr.close()
        cleanup_jobs(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def _pump(process: subprocess.Popen[str], lines: queue.Queue[str | None], seen: list[str]) -> None:
    """Keep reading the head's stdout so the pipe never fills; hand each line over."""
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line.rstrip("\n"))
        lines.put(line)
    lines.put(None)


def _wait_ready(process: subprocess.Popen[str], lines: queue.Queue[str | None], timeout: float, log: Path) -> str:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"the head was not ready within {timeout:g} s; its stderr:\n{_tail(log)}")
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            continue
        if line is None:
            process.wait(timeout=5)
            raise RuntimeError(f"the head exited (code {process.returncode}) before it was ready:\n{_tail(log)}")
        if line.startswith(READY_PREFIX):
            return line[len(READY_PREFIX) :].split()[0]


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no stderr)"


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def cleanup_jobs(tmp: Path) -> int:
    """Kill the job processes left behind by a head whose files (data dir included) lie under ``tmp``.

    Returns how many processes or process groups were signalled."""
    killed = 0
    # Worker process groups, as recorded by their supervisors (a worker's command line does not
    # name the data dir, so it could not be found by the scan below).
    for child_file in tmp.rglob("runs/*/*/*/child.json"):
        if (child_file.parent / "exit.json").exists():
            continue  # the supervisor saw it end and already killed the rest of its group
        try:
            pgid = int(json.loads(child_file.read_text())["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            killed += 1
    # Anything else whose command line names the temporary directory: supervisors, mostly.
    needle = str(tmp).encode()
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def machine() -> dict[str, object]:
    """What the figures were measured on."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": model or platform.processor() or platform.machine(),
        "processor": platform.processor(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = min(len(ordered), max(1, math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max/mean of durations given in seconds, in milliseconds."""
    return {
        "n": len(values_s),
        "p50": round(percentile(values_s, 50) * 1000, 2),
        "p90": round(percentile(values_s, 90) * 1000, 2),
        "p99": round(percentile(values_s, 99) * 1000, 2),
        "max": round(max(values_s) * 1000, 2),
        "mean": round(sum(values_s) / len(values_s) * 1000, 2),
    }


def machine_line(info: dict[str, object]) -> str:
    return f"machine: {info['cpu_count']} CPUs ({info['cpus_usable']} usable), {info['cpu_model']}, {info['platform']}"

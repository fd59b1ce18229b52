"""The run directory: what the node runtime and a worker's supervisor tell each other, on disk.

One directory per worker attempt (``runs/job-J/attempt-A/worker-W`` under the node's data dir).
The runtime writes the spec and starts the supervisor; the supervisor writes its pid, then the
worker's process group, and last the exit record; a restarted head reads them back. Every file
that is read while another process may write it is replaced atomically.

The lease (Ray backend) is a file in the node's data dir that the runtime touches while its node
is part of the cluster; ``lease_expired`` is the one rule both sides apply to it.

Standard library only, and light: the supervisor imports this module on every launch, on the
node's cores beside the worker, so the records are ``NamedTuple``s (frozen and typed, without the
~20 ms that importing ``dataclasses`` and generating dataclasses cost each supervisor).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from gpupool.node import cgroups
from gpupool.node.accounts import Account
from gpupool.node.container import ContainerSpec
from gpupool.node.image_job import ImageJob
from gpupool.node.jobns import Scratch

SPEC = "spec.json"  # written by the runtime before the supervisor starts
SUPERVISOR_PID = "supervisor.pid"  # the supervisor's pid (for a detached one, written by its parent)
SUPERVISOR_ERR = "supervisor.err"  # the supervisor's own stderr
# When a supervisor forked by the zygote started (/proc/PID/stat field 22): its cmdline is the
# zygote's, so this, with its pid, tells it from a process that reused the pid.
STARTED = "supervisor.started"
CHILD = "child.json"  # the worker's pid and process group, once it started
EXIT = "exit.json"  # how the worker ended; its presence means "ended"
STOP = "stop.json"  # why the node runtime stopped the worker (over its GPU memory share), before it ends
LEASE = "lease"  # in the node's data dir, not in a run dir
DEFAULT_GRACE_S = 10.0
DEFAULT_LEASE_TIMEOUT_S = 10.0


class Lease(NamedTuple):
    """The node's lease file, and how old it may grow before the supervisor fences its worker."""

    path: str
    timeout_s: float


class RunSpec(NamedTuple):
    """What the supervisor runs, and how (``spec.json``)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    log: str  # the worker's log file; the supervisor appends the header, then the worker's output
    header: str
    cwd: str | None = None
    cpus: tuple[int, ...] = ()  # host CPU indices for the worker's affinity; () leaves it alone
    memory_mib: int = 0  # 0: no limit
    cpu_milli: int = 0  # a fraction of a core on the shared ``cpus``: its CPU quota (with a cgroup)
    grace_s: float = DEFAULT_GRACE_S  # between SIGTERM and SIGKILL
    lease: Lease | None = None  # None: no self-fencing
    # The worker's cgroup: "<node key>/job-<id>-<attempt>-w<worker>" under gpupool's parent group
    # (``node/cgroups.py``); None: no cgroup (not root, or no cgroup fs)
    cgroup: str | None = None
    pids_max: int = 0  # with a cgroup: the most processes and threads the worker may have; 0: no limit
    devices_allow: tuple[str, ...] = ()  # with a cgroup: the job's GPU device files
    devices_deny: tuple[str, ...] = ()  # with a cgroup: the node's other GPU device files
    account: Account | None = None  # the Unix account the worker runs as; None: the supervisor's own
    devices_keep: tuple[str, ...] = ()  # with a cgroup: the driver's files every CUDA process opens
    device_program: bool = False  # with a cgroup: the node walls devices with a cgroup2 BPF program too
    scratch: Scratch | None = None  # the job's private /tmp, /dev/shm and /proc; None: the host's
    container: ContainerSpec | None = None  # the image's root the worker runs in; None: the node's own
    image: ImageJob | None = None  # the image to get first (its root then fills ``container.root``)

    def group(self, layout: cgroups.Layout | None = None) -> cgroups.WorkerGroup:
        """The worker's cgroup (``cgroup`` must be set), in ``layout`` (the node runtime's, found
        once when it started), else in the layout found now."""
        assert self.cgroup is not None
        node, _, name = self.cgroup.partition("/")
        return cgroups.WorkerGroup(layout or cgroups.detect(device_program=self.device_program), node, name)

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "argv": list(self.argv),
            "env": dict(self.env),
            "cwd": self.cwd,
            "log": self.log,
            "cpus": list(self.cpus),
            "memory_mib": self.memory_mib,
            "grace_s": self.grace_s,
            "header": self.header,
        }
        if self.cpu_milli:  # only for a fraction of a core: a whole-core spec reads as before
            data["cpu_milli"] = self.cpu_milli
        if self.lease is not None:
            data["lease"] = self.lease.path
            data["lease_timeout_s"] = self.lease.timeout_s
        if self.cgroup is not None:
            data["cgroup"] = self.cgroup
            data["pids_max"] = self.pids_max
            data["devices_allow"] = list(self.devices_allow)
            data["devices_deny"] = list(self.devices_deny)
            data["devices_keep"] = list(self.devices_keep)
            data["device_program"] = self.device_program
        if self.account is not None:
            data["account"] = self.account.to_json()
        if self.scratch is not None:
            data["scratch"] = self.scratch.to_json()
        if self.container is not None:  # only with an image: a spec without one reads as before
            data["container"] = self.container.to_json()
        if self.image is not None:
            data["image"] = self.image.to_json()
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        data = json.loads(text)
        lease = None
        if data.get("lease"):
            lease = Lease(str(data["lease"]), float(data.get("lease_timeout_s") or DEFAULT_LEASE_TIMEOUT_S))
        return cls(
            argv=tuple(str(a) for a in data["argv"]),
            env={str(k): str(v) for k, v in data["env"].items()},
            log=str(data["log"]),
            header=str(data["header"]),
            cwd=data.get("cwd") or None,
            cpus=tuple(int(c) for c in data.get("cpus") or ()),
            memory_mib=int(data.get("memory_mib") or 0),
            cpu_milli=int(data.get("cpu_milli") or 0),
            grace_s=float(data.get("grace_s", DEFAULT_GRACE_S)),
            lease=lease,
            cgroup=data.get("cgroup") or None,
            pids_max=int(data.get("pids_max") or 0),
            devices_allow=tuple(str(d) for d in data.get("devices_allow") or ()),
            devices_deny=tuple(str(d) for d in data.get("devices_deny") or ()),
            account=Account.from_json(data["account"]) if data.get("account") else None,
            devices_keep=tuple(str(d) for d in data.get("devices_keep") or ()),
            device_program=bool(data.get("device_program")),
            scratch=Scratch.from_json(data["scratch"]) if data.get("scratch") else None,
            container=ContainerSpec.from_json(data["container"]) if data.get("container") else None,
            image=ImageJob.from_json(data["image"]) if data.get("image") else None,
        )


class ExitRecord(NamedTuple):
    """How a worker ended (``exit.json``). ``fenced``: stopped by its own node (self-fencing, or
    cleaned when the node came back), so the head counts it lost whatever its exit code."""

    exit_code: int | None
    fenced: bool = False
    note: str | None = None
    finished_at: str | None = None  # ISO 8601, UTC
    reason: str | None = None  # why it was killed, when the node knows: "oom" (its memory limit)
    image_digest: str | None = None  # with an image: the manifest digest it ran in

    @property
    def lost(self) -> bool:
        return self.fenced or self.exit_code is None

    def to_json(self) -> str:
        data: dict[str, Any] = {"exit_code": self.exit_code}
        if self.finished_at is not None:
            data["finished_at"] = self.finished_at
        if self.fenced:
            data["fenced"] = True
        if self.note is not None:
            data["note"] = self.note
        if self.reason is not None:
            data["reason"] = self.reason
        if self.image_digest is not None:
            data["image_digest"] = self.image_digest
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> ExitRecord:
        data = json.loads(text)
        code = data.get("exit_code")
        return cls(
            exit_code=None if code is None else int(code),
            fenced=bool(data.get("fenced")),
            note=data.get("note"),
            finished_at=data.get("finished_at"),
            reason=data.get("reason"),
            image_digest=data.get("image_digest"),
        )


class ChildRecord(NamedTuple):
    """The worker process (``child.json``); it leads its own process group."""

    pid: int
    pgid: int

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "pgid": self.pgid})

    @classmethod
    def from_json(cls, text: str) -> ChildRecord:
        data = json.loads(text)
        return cls(pid=int(data["pid"]), pgid=int(data["pgid"]))


def run_dir(data_dir: Path, job_id: int, attempt: int, worker: int) -> Path:
    return data_dir / "runs" / f"job-{job_id}" / f"attempt-{attempt}" / f"worker-{worker}"


def all_run_dirs(data_dir: Path) -> list[Path]:
    runs = data_dir / "runs"
    return sorted(runs.glob("job-*/attempt-*/worker-*")) if runs.exists() else []


def lease_age(path: Path | str, now: float | None = None) -> float:
    """Seconds since the lease was last renewed; infinite when it was never written."""
    try:
        renewed = os.stat(path).st_mtime
    except OSError:
        return float("inf")
    return (time.time() if now is None else now) - renewed


def lease_expired(path: Path | str, timeout_s: float, now: float | None = None) -> bool:
    """The node lost contact with the cluster: the runtime refuses to describe itself as up, and
    the supervisor does not start (or stops) its worker."""
    return lease_age(path, now) > timeout_s


def read_spec(run: Path) -> RunSpec:
    return RunSpec.from_json((run / SPEC).read_text())


def read_exit(run: Path) -> ExitRecord | None:
    """None while no exit is recorded (or the record cannot be read)."""
    try:
        return ExitRecord.from_json((run / EXIT).read_text())
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def write_exit(run: Path, record: ExitRecord) -> None:
    _replace(run / EXIT, record.to_json())


class StopRecord(NamedTuple):
    """Why the node runtime itself stopped a worker (``stop.json``): the exit's reason wins over
    the supervisor's, which only saw a SIGKILL."""

    reason: str
    note: str

    def to_json(self) -> str:
        return json.dumps({"reason": self.reason, "note": self.note})


def write_stop(run: Path, record: StopRecord) -> None:
    _replace(run / STOP, record.to_json())


def read_stop(run: Path) -> StopRecord | None:
    try:
        data = json.loads((run / STOP).read_text())
        return StopRecord(str(data["reason"]), str(data.get("note") or ""))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def remove_job(data_dir: Path, job_id: int) -> bool:
    """Delete a finished job's run directories and logs on this node; True if there were any."""
    found = False
    for path in (data_dir / "runs" / f"job-{job_id}", data_dir / "logs" / f"job-{job_id}"):
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
            found = True
    return found


def read_child(run: Path) -> ChildRecord | None:
    try:
        return ChildRecord.from_json((run / CHILD).read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def write_child(run: Path, record: ChildRecord) -> None:
    _replace(run / CHILD, record.to_json())


def read_pid(run: Path) -> int | None:
    try:
        return int((run / SUPERVISOR_PID).read_text())
    except (OSError, ValueError):
        return None


def write_pid(run: Path, pid: int) -> None:
    _replace(run / SUPERVISOR_PID, str(pid))


def _replace(path: Path, text: str) -> None:
    """Write then rename: a reader sees the old content or the new, never half of it. Readable
    by the node's user alone, whatever the umask."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def read_log(path: Path, offset: int = 0, limit: int = 1 << 20) -> bytes:
    """Up to ``limit`` bytes of a worker's log from ``offset``; nothing past its end. A negative
    ``offset`` counts from the end (the head's own use: a crash-looping replica's last lines; the
    API refuses one)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset if offset >= 0 else max(0, os.fstat(f.fileno()).st_size + offset))
            return f.read(limit)
    except (FileNotFoundError, OverflowError):
        return b""
    except OSError as exc:  # an offset past what the file system allows: nothing there
        if exc.errno == errno.EINVAL:
            return b""
        raise


EXITS_FIFO = "exits.fifo"  # in a node's data dir: the doorbell of node/exit_watch.py


def ring(run_dir: Path) -> None:
    """Tell the runtime of ``run_dir``'s node that an exit was recorded (the supervisor's side).
    Never blocks and never fails: with nobody listening the head finds the exit by polling."""
    fifo = run_dir.parents[3] / EXITS_FIFO  # DATA_DIR/runs/job-J/attempt-A/worker-W
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:  # ENXIO: no reader; ENOENT: a runtime without the FIFO
        return
    try:
        os.write(fd, b"x")
    except OSError:
        pass  # full (a burst of exits already rang) or the reader went away
    finally:
        os.close(fd)


def started_at(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks since boot: with its pid, a process's identity."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return None


def supervisor_running(pid: int, run_dir: Path) -> bool:
    """Whether ``pid`` is the live supervisor of ``run_dir``, not a process that reused the pid:
    one started as ``python -m gpupool.node.supervisor SPEC`` names the run directory in its
    command line; one forked by the zygote recorded its start time there."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    if str(run_dir).encode() in cmdline:
        return True
    try:
        recorded = (run_dir / STARTED).read_text().strip()
    except OSError:
        return False
    return bool(recorded) and recorded == started_at(pid)


def refuse(run_dir: Path, log: Path, header: str, why: str, reason: str) -> None:
    """A worker that cannot start, recorded as if its supervisor had tried (exit 126, with why in
    its log), so the head learns it through the same ``poll`` as any other exit (its handle has
    no supervisor pid)."""
    with open(log, "a") as f:
        f.write(f"{header}\ngpupool: {why}; not starting the worker\n")
    record = ExitRecord(126, note=why, finished_at=datetime.now(UTC).isoformat(), reason=reason)
    write_exit(run_dir, record)
    ring(run_dir)

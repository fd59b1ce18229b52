"""A job's private ``/tmp``, ``/dev/shm`` and ``/proc`` on a node (issue 29).

Files a job leaves in a shared ``/tmp`` or ``/dev/shm`` outlive it, are read by other users' jobs
(0644 by default), and, in a tmpfs, hold host memory that no ``--memory`` limit counts once the job
is gone. Slurm answers with ``job_container/tmpfs``; systemd with ``PrivateTmp=``. Here each worker
enters, between fork and exec and before it drops to its owner's account, a mount namespace where

- ``/tmp`` and ``/dev/shm`` are fresh tmpfs mounts, owned by the job's account (0700), each bounded
  by the worker's memory limit (else by half the node's memory). Their pages are charged to the
  memory cgroup of the process that writes them: a job over ``--memory`` through ``/dev/shm`` is
  killed ``oom`` like any other;
- ``/proc`` is a procfs of its own with ``hidepid=2``: a job sees its own account's processes and
  no one else's command lines (each procfs mount has its own options since Linux 5.8);
- the host paths under ``/tmp`` that the job was started with (its working directory, its
  checkpoint directory, the MPS control daemon's pipe directory) are bound in at the same place,
  so ``cd /tmp/proj && gpupool submit ...`` keeps working; the rest of the host ``/tmp`` is gone.

Nothing outside holds the namespace: when the worker's last process ends (its cgroup is killed at
the end, whatever ended it), the kernel frees the namespace, its tmpfs mounts and their pages.
Workers of one gang on one node share one namespace (NCCL and torch exchange data through
``/dev/shm`` between local ranks): the first makes it and records it, the next ones join it with
``setns``, under a lock in the job's run directory on the node, which only the node's user reads.

Standard library only (``ctypes`` for ``unshare``, ``setns`` and ``mount``, through the C library
handle ``node/bpf.py`` keeps): it runs in the forked child of the supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple

from gpupool.node.bpf import libc, libc_error

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_MOVE, MS_REC, MS_SLAVE = 4096, 8192, 16384, 1 << 19
# Made anew for every job; /tmp last: the node's data dir (and so the staging directory) may be in it.
PRIVATE = ("/dev/shm", "/tmp")
HIDEPID_SINCE = (5, 8)  # Linux: from here each procfs mount has options of its own
LOCK = "scratch.lock"  # in the job's attempt directory on the node, beside its workers' run dirs
RECORD = "scratch.json"


class Scratch(NamedTuple):
    """What a worker's supervisor needs to give it its private namespace (in its spec)."""

    job_dir: str  # the job attempt's directory on the node (the lock and the record live there)
    size_bytes: int  # each tmpfs's bound
    uid: int  # the job's account, which owns /tmp and /dev/shm
    gid: int
    binds: tuple[str, ...] = ()  # host paths under /tmp kept visible at the same place
    hidepid: bool = True  # /proc shows only the job's own account's processes

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "binds": list(self.binds)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Scratch:
        return cls(
            job_dir=str(data["job_dir"]),
            size_bytes=int(data["size_bytes"]),
            uid=int(data["uid"]),
            gid=int(data["gid"]),
            binds=tuple(str(b) for b in data.get("binds") or ()),
            hidepid=bool(data.get("hidepid", True)),
        )


def kept(paths: Sequence[str | None]) -> tuple[str, ...]:
    """Those of ``paths`` that a private ``/tmp`` would hide and that must stay: strictly below
    ``/tmp`` (never ``/tmp`` itself, which is the point), existing directories, each once."""
    out: list[str] = []
    for path in paths:
        if not path:
            continue
        real = os.path.realpath(path)
        if real.startswith("/tmp/") and os.path.isdir(real) and real not in out:
            out.append(real)
    return tuple(out)


def enter(scratch: Scratch) -> bool:
    """In the worker, between fork and exec, as root: join the job's namespace on this node, or
    make it; True when it made it (the worker that builds what else the namespace holds, such as
    an image's root: ``node/container.py``). Raises OSError when neither works (the worker must not
    start without its walls). The job's directory is held open: once /tmp is private, a node data
    dir under it is out of sight."""
    job_dir = os.open(scratch.job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        lock = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600, dir_fd=job_dir)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            record = _read(job_dir)
            ns = record.get("ns")
            # A recorded worker still in the recorded namespace (the inode tells it from a reused pid).
            alive = [p for p in record.get("pids", ()) if ns is not None and _ns_of(p) == ns]
            if alive:
                _join(alive[0])
            else:
                _make(scratch)
                ns = _ns_of(os.getpid())
            _write(job_dir, {"ns": ns, "pids": [*alive, os.getpid()]})
        finally:
            os.close(lock)
    finally:
        os.close(job_dir)
    return not alive


def usable() -> str | None:
    """None where this node can give jobs a private namespace; else why not. Tried once per
    process, in a child of its own (a mount namespace, a tmpfs in it), never in this process."""
    return _usable(sys.executable)


def hidepid_usable() -> bool:
    """Whether a procfs mounted for a job can hide other accounts' processes without changing the
    host's ``/proc`` (older kernels share one set of options for every mount)."""
    parts = os.uname().release.split(".")
    try:
        return (int(parts[0]), int(parts[1].split("-")[0])) >= HIDEPID_SINCE
    except (IndexError, ValueError):
        return False


@cache
def _usable(python: str) -> str | None:
    if os.geteuid() != 0:
        return "not root: only root can give a job a mount namespace"
    try:
        done = subprocess.run(
            [python, "-c", "from gpupool.node import jobns; jobns._try()"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot try it: {exc}"
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["it failed"])[-1]


def _try() -> None:
    """The child of ``usable``: a namespace with a tmpfs on /tmp, as a job would get."""
    try:
        _unshare()
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0700")
    except OSError as exc:
        sys.exit(str(exc))


def _make(scratch: Scratch) -> None:
    """Each tmpfs is made on a staging directory first (in the job's directory on the node; only
    this namespace sees the mount there), the kept host paths bound into it while they are still
    in sight, then the whole is moved over /tmp or /dev/shm."""
    _unshare()
    stage = os.path.join(scratch.job_dir, "stage")
    os.makedirs(stage, mode=0o700, exist_ok=True)
    options = f"size={scratch.size_bytes},mode=0700,uid={scratch.uid},gid={scratch.gid}"
    for target in PRIVATE:
        if not os.path.isdir(target):
            continue
        _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, options)
        for path in scratch.binds:
            if path.startswith(target + "/") and os.path.isdir(path):
                inner = stage + path[len(target) :]
                os.makedirs(inner, mode=0o755, exist_ok=True)
                _mount(path, inner, None, MS_BIND | MS_REC, None)
        _mount(stage, target, None, MS_MOVE, None)
    if scratch.hidepid:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")


def _unshare() -> None:
    """A mount namespace of our own whose mounts never propagate back to the host's."""
    if libc().unshare(CLONE_NEWNS) != 0:
        raise libc_error("unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_SLAVE, None)


def _join(pid: int) -> None:
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc().setns(fd, CLONE_NEWNS) != 0:
            raise libc_error(f"setns into the job's namespace (process {pid})")
    finally:
        os.close(fd)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if libc().mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        raise libc_error(f"mount {fstype or source or 'propagation'} on {target}")


def _ns_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


def _read(job_dir: int) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        fd = os.open(RECORD, os.O_RDONLY | os.O_CLOEXEC, dir_fd=job_dir)
        with os.fdopen(fd) as f:
            data = json.load(f)
        if isinstance(data, dict):
            return data
    return {}


def _write(job_dir: int, record: dict[str, Any]) -> None:
    tmp = f"{RECORD}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600, dir_fd=job_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, RECORD, src_dir_fd=job_dir, dst_dir_fd=job_dir)

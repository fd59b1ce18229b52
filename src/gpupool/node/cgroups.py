"""One cgroup per worker, on whatever cgroup layout the machine has (issue 14).

A session or process group is a convention a job can leave (``setsid``, double fork, ``nohup``),
rlimits are per process; a cgroup holds every descendant. So it limits memory (swap included),
pins cores (``sched_setaffinity`` cannot widen a cpuset), caps tasks, hides other jobs' GPUs,
measures use and kills all a job started: a GPU is free only once its worker's group is empty.

The layout is read from ``/proc/self/mountinfo``: cgroup v2 with its controllers (devices there
are walled by a BPF device program, ``node/devices.py``, where the kernel lets one be attached),
v1 (kill freezes first, so nothing forks between listing members and SIGKILL), or the hybrid one
this project is built on: cgroup2 at ``<root>/unified`` without controllers (still
``cgroup.kill``, CPU time and device programs) beside v1 memory, cpuset, pids, devices; there both
device walls hold. A worker's group is ``<parent>/<node>/<worker>`` in each hierarchy used; the
node level keeps two virtual nodes on one machine apart. What cannot be set up is left out and
said (``Layout.isolation``, ``Layout.notes``), never pretended.

Standard library only (its reading, ``Stats``, is the domain's, itself stdlib-only): the supervisor
(``python -m gpupool.node.supervisor``) runs it on every launch, ``WorkerGroup.add_self`` in the
forked child before exec.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpupool.domain.launch import Stats
from gpupool.node import devices
from gpupool.node.cgfiles import read as _read
from gpupool.node.cgfiles import read_int as _read_int
from gpupool.node.cgfiles import stat_field as _stat_field
from gpupool.node.cgfiles import write as _write

V1_USED = ("memory", "cpuset", "pids", "devices", "freezer", "cpuacct", "cpu")
V2_USED = ("memory", "cpuset", "pids", "cpu")
CPU_PERIOD_US = 100_000  # the quota period for a fraction of a core: 0.5 core = 50 ms of each 100 ms
MIN_QUOTA_US = 1_000  # the kernel refuses a smaller quota  # the v2 controllers we enable below the parent group
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # one path component, no "..", no "/"


class CgroupError(Exception):
    """A limit the layout claims to enforce could not be applied to a worker's group."""


@dataclass(frozen=True)
class Limits:
    """What one worker may use; zero or empty is no limit. Devices: the other GPUs' device files
    are denied and the job's own allowed, the rest (``nvidiactl``, ``nvidia-uvm``, ptys...) left as
    the parent has it, so no CUDA job breaks on a list one entry short. The kernel checks numbers,
    not paths: a node a job makes with ``mknod`` for a denied GPU is denied too."""

    memory_mib: int = 0
    cpus: tuple[int, ...] = ()
    pids_max: int = 0
    devices_allow: tuple[str, ...] = ()
    devices_deny: tuple[str, ...] = ()
    cpu_milli: int = 0  # a fraction of a core: CPU time per period held to it (cpu.max / CFS quota)
    devices_keep: tuple[str, ...] = ()  # the driver's files every CUDA process needs (nvidiactl...)


@dataclass(frozen=True)
class Layout:
    """Which hierarchy serves what, limited to where the parent group could be created."""

    root: str
    parent: str
    unified: str | None = None  # the cgroup2 mount, when <unified>/<parent> exists
    v2: frozenset[str] = frozenset()  # v2 controllers enabled for the children of <parent>
    v1: Mapping[str, str] = field(default_factory=dict)  # v1 controller -> its mount
    v2_kill: bool = False  # cgroup.kill (Linux 5.14)
    v2_freeze: bool = False  # cgroup.freeze (Linux 5.2)
    swap: bool = False  # the memory limit covers swap too
    notes: tuple[str, ...] = ()  # why something is not enforced
    device_program: bool = False  # a BPF device program can be attached to the cgroup2 groups

    def mechanism(self, what: str) -> str:
        """How ``what`` (memory, cpus, pids, devices, kill) is enforced, or ``none``."""
        if what == "kill":
            kill = "v2 cgroup.kill" if self.v2_kill else "v2 cgroup.freeze" if self.v2_freeze else "v1 freezer"
            return f"cgroup {kill}" if self.v2_kill or self.v2_freeze or "freezer" in self.v1 else "none"
        if what == "devices":
            held = ["cgroup v1 devices"] if "devices" in self.v1 else []
            held += ["cgroup v2 device program (BPF)"] if self.device_program else []
            return " + ".join(held) or "none"
        controller = {"cpus": "cpuset", "cpu quota": "cpu"}.get(what, what)
        version = "v2" if controller in self.v2 else "v1" if controller in self.v1 else None
        if version is None:
            return "none"
        swap = ("+swap" if self.swap else " (swap not limited)") if controller == "memory" else ""
        return f"cgroup {version} {controller}{swap}"

    def isolation(self) -> dict[str, str]:
        """What a node reports it enforces per worker (``users`` is the supervisor's to add)."""
        return {what: self.mechanism(what) for what in ("memory", "cpus", "cpu quota", "devices", "kill")}

    def mounts(self) -> list[str]:
        """Every hierarchy a worker group lives in (v1 mounts shared by controllers once)."""
        found = [self.unified] if self.unified else []
        return found + sorted({m for m in self.v1.values() if m not in found})


def detect(
    root: str = "/sys/fs/cgroup",
    parent: str = "gpupool",
    *,
    unified: bool = True,
    mountinfo: str = "",
    device_program: bool | None = None,
) -> Layout:
    """Find the cgroup hierarchies under ``root`` and create ``<parent>`` in those we will use.

    ``unified=False`` ignores cgroup2 (tests use it to exercise the v1 freezer path). A hierarchy
    where ``<parent>`` cannot be made (read-only, not root, no delegation) is left out and noted.
    ``device_program``: whether device programs can be attached below ``<parent>`` in cgroup2;
    None tries it (the node runtime, once at start); a supervisor is told what its runtime found.
    """
    if not all(NAME_RE.fullmatch(part) for part in parent.split("/")):
        raise ValueError(f"bad cgroup path {parent!r}")
    v1_mounts, v2_mount = _mounts(os.path.normpath(root), mountinfo or "/proc/self/mountinfo")
    notes: list[str] = []
    v2: frozenset[str] = frozenset()
    kill = freeze = False
    if unified and v2_mount is not None:
        _enable_v2(v2_mount)
    if not unified or v2_mount is None or not _ensure(v2_mount, parent, notes):
        v2_mount = None
    else:  # what the parent group got is what its children can have
        group = os.path.join(v2_mount, parent)
        v2 = frozenset((_read(group, "cgroup.controllers") or "").split()) & frozenset(V2_USED)
        kill, freeze = (os.path.exists(os.path.join(group, f)) for f in ("cgroup.kill", "cgroup.freeze"))
    wanted = [c for c in V1_USED if c not in v2]
    if v2_mount is not None:  # cgroup2 itself gives CPU time, and kill or freeze where the kernel has them
        wanted = [c for c in wanted if c != "cpuacct" and (c != "freezer" or not (kill or freeze))]
    v1 = {c: v1_mounts[c] for c in wanted if c in v1_mounts and _ensure(v1_mounts[c], parent, notes)}
    if "memory" in v2:
        swap = os.path.exists(os.path.join(str(v2_mount), parent, "memory.swap.max"))
    else:
        swap = "memory" in v1 and os.path.exists(os.path.join(v1["memory"], "memory.memsw.limit_in_bytes"))
    notes += [f"{c}: no usable cgroup hierarchy under {root}" for c in V1_USED[:3] if c not in v1 and c not in v2]
    program = False
    if v2_mount is not None:
        why = devices.usable(os.path.join(v2_mount, parent)) if device_program is None else None
        program = why is None if device_program is None else device_program
        if why is not None:
            notes.append(f"devices: no cgroup v2 device program ({why})")
    if "devices" not in v1 and not program and v2_mount is None:
        notes.append(f"devices: no usable cgroup hierarchy under {root}")
    return Layout(root, parent, v2_mount, v2, v1, kill, freeze, swap, tuple(notes), program)


def _mounts(root: str, mountinfo: str) -> tuple[dict[str, str], str | None]:
    """v1 controller -> mount point, and the cgroup2 mount, for mounts at or under ``root``."""
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in (_read(mountinfo) or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, info = left.split(), right.split()
        if len(fields) < 5 or len(info) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if point != root and not point.startswith(root + "/"):
            continue
        if info[0] == "cgroup2" and (v2 is None or point == root):
            v2 = point
        elif info[0] == "cgroup":
            for option in info[2].split(","):
                if option in V1_USED:
                    v1.setdefault(option, point)
    return v1, v2


def _enable_v2(mount: str) -> None:
    """Offer the controllers we use to the top-level groups (systemd machines already do)."""
    for c in set(V2_USED) & set((_read(mount, "cgroup.controllers") or "").split()):
        with contextlib.suppress(OSError):
            _write(os.path.join(mount, "cgroup.subtree_control"), f"+{c}")


def ensure_group(mount: str, rel: str) -> str | None:
    """The group ``rel`` in the hierarchy at ``mount``, made if missing (its path); None if it cannot be."""
    return os.path.join(mount, rel) if _ensure(mount, rel) else None


def _ensure(mount: str, rel: str, notes: list[str] | None = None) -> bool:
    """mkdir each level of ``rel`` in ``mount``. v1 cpuset levels copy their parent's cpus and
    mems (a v1 cpuset with none takes no tasks); v2 levels get the controllers their parent has."""
    path = mount
    try:
        for part in rel.split("/"):
            up, path = path, os.path.join(path, part)
            wanted = [c for c in (_read(up, "cgroup.controllers") or "").split() if c in V2_USED]
            if up != mount and wanted:
                _write(os.path.join(up, "cgroup.subtree_control"), " ".join(f"+{c}" for c in wanted))
            with contextlib.suppress(FileExistsError):
                os.mkdir(path)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if os.path.exists(os.path.join(path, "tasks")) and _read(path, name) == "":
                    _write(os.path.join(path, name), _read(up, name) or "")
        return True
    except OSError as exc:
        if notes is not None:
            notes.append(f"cannot create {path}: {exc.strerror or exc}")
        return False


class WorkerGroup:
    """One worker's cgroup, the same relative path in every hierarchy of ``layout``."""

    def __init__(self, layout: Layout, node: str, name: str) -> None:
        for part in (node, name):
            if not NAME_RE.fullmatch(part):
                raise ValueError(f"bad cgroup name {part!r}")
        self.layout = layout
        self.rel = f"{layout.parent}/{node}/{name}"
        self.dirs = {m: os.path.join(m, self.rel) for m in layout.mounts()}
        # Encoded once here, so the forked child only opens and writes (see add_self).
        self._procs = tuple(os.fsencode(os.path.join(d, "cgroup.procs")) for d in self.dirs.values())
        self._killing = False

    @classmethod
    def for_worker(cls, layout: Layout, node: str, job_id: int, attempt: int, worker: int) -> WorkerGroup:
        return cls(layout, node, f"job-{job_id}-{attempt}-w{worker}")

    def create(self, limits: Limits) -> None:
        """Make the group everywhere and apply ``limits`` as the layout can. CgroupError (the group
        removed) when what the layout says it enforces cannot be applied: better no launch than
        an unconfined one."""
        try:
            for mount in self.dirs:
                if not _ensure(mount, self.rel):
                    raise CgroupError(f"cannot create {self.dirs[mount]}")
            self._apply(limits)
        except (OSError, CgroupError) as exc:
            self.remove()
            raise CgroupError(f"cgroup {self.rel}: {exc}") from exc

    def _apply(self, limits: Limits) -> None:
        v2 = self.layout.v2
        if limits.memory_mib and (d := self._dir("memory")):
            limit = str(limits.memory_mib * 2**20)
            if "memory" in v2:
                self._set(d, "memory.max", limit)
                self._set(d, "memory.swap.max", "0", optional=True)
            else:  # limit first: memsw may never be below it
                self._set(d, "memory.limit_in_bytes", limit)
                self._set(d, "memory.memsw.limit_in_bytes", limit, optional=True)
        if limits.cpus and (d := self._dir("cpuset")):
            self._set(d, "cpuset.cpus", ",".join(str(c) for c in sorted(set(limits.cpus))))
        if limits.cpu_milli and (d := self._dir("cpu")):
            quota = str(max(limits.cpu_milli * CPU_PERIOD_US // 1000, MIN_QUOTA_US))
            if "cpu" in v2:
                self._set(d, "cpu.max", f"{quota} {CPU_PERIOD_US}")
            else:
                self._set(d, "cpu.cfs_period_us", str(CPU_PERIOD_US))
                self._set(d, "cpu.cfs_quota_us", quota)
        if limits.pids_max and (d := self._dir("pids")):
            self._set(d, "pids.max", str(limits.pids_max))
        if (limits.devices_allow or limits.devices_deny) and (d := self._dir("devices")):
            for path in limits.devices_deny:
                self._set(d, "devices.deny", _device_rule(path))
            for path in limits.devices_allow:
                self._set(d, "devices.allow", _device_rule(path))
        if (limits.devices_allow or limits.devices_deny) and self.layout.device_program and (d := self._dir("unified")):
            rules = devices.gpu_rules(limits.devices_allow, limits.devices_deny, limits.devices_keep)
            if rules:
                devices.attach(d, rules)

    def _dir(self, controller: str) -> str | None:
        lay = self.layout  # "unified": the cgroup2 group, whatever its controllers
        mount = lay.unified if controller == "unified" or controller in lay.v2 else lay.v1.get(controller)
        return None if mount is None else self.dirs[mount]

    @staticmethod
    def _set(directory: str, name: str, value: str, *, optional: bool = False) -> None:
        if not optional or os.path.exists(os.path.join(directory, name)):
            _write(os.path.join(directory, name), value)

    def add_self(self) -> None:
        """Move the calling process into the group: meant as ``preexec_fn``, between fork and
        exec, so the worker and all it starts are inside before its first instruction. Writing
        "0" means "the writer" on v1 and v2, so nothing is formatted or allocated here."""
        for path in self._procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def add(self, pid: int) -> None:
        for path in self._procs:
            _write(os.fsdecode(path), str(pid))

    def pids(self) -> set[int]:
        """Live members in any hierarchy (a zombie is no longer listed: it holds nothing)."""
        return {int(p) for d in self.dirs.values() for p in (_read(d, "cgroup.procs") or "").split()}

    def empty(self) -> bool:
        return not any(_read(d, "cgroup.procs") for d in self.dirs.values())

    def kill(self) -> None:
        """SIGKILL every member, descendants that left the session or process group included.
        Never raises: it runs on teardown paths. Call ``wait_empty`` to know they are gone."""
        self._killing = True
        with contextlib.suppress(OSError):
            if self.layout.v2_kill and self.layout.unified:
                _write(os.path.join(self.dirs[self.layout.unified], "cgroup.kill"), "1")
                return
        self._frozen_kill()

    def _frozen_kill(self) -> None:
        """Freeze (so nothing forks), SIGKILL each member, thaw (so the kills take effect).
        Without any freezer it still kills what it sees; wait_empty repeats it."""
        v2 = self.layout.v2_freeze and self.layout.unified is not None
        mount = self.layout.unified if v2 else self.layout.v1.get("freezer")
        group = None if mount is None else self.dirs[mount]
        file, frozen, thawed = ("cgroup.freeze", "1", "0") if v2 else ("freezer.state", "FROZEN", "THAWED")
        state, done = ("cgroup.events", "frozen 1") if v2 else ("freezer.state", "FROZEN")  # FREEZING until then
        try:
            if group is not None:
                _write(os.path.join(group, file), frozen)
                deadline = time.monotonic() + 1.0
                while done not in (_read(group, state) or done) and time.monotonic() < deadline:
                    time.sleep(0.001)
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        finally:
            if group is not None:
                with contextlib.suppress(OSError):
                    _write(os.path.join(group, file), thawed)

    def wait_empty(self, timeout: float) -> bool:
        """True once no process is left in the group (checked about every 1-20 ms)."""
        deadline = time.monotonic() + timeout
        step = 0.001
        while not self.empty():
            if time.monotonic() >= deadline:
                return False
            if self._killing and not self.layout.v2_kill:
                self._frozen_kill()
            time.sleep(step)
            step = min(step * 2, 0.02)
        return True

    def stats(self) -> Stats:
        memory = self._dir("memory")
        v2 = "memory" in self.layout.v2
        current = _read_int(memory, "memory.current" if v2 else "memory.usage_in_bytes")
        peak = _read_int(memory, "memory.peak" if v2 else "memory.max_usage_in_bytes")
        usec = _stat_field(self._dir("unified"), "cpu.stat", "usage_usec")  # v2 has it with no controller
        nsec = _read_int(self._dir("cpuacct"), "cpuacct.usage")
        return Stats(current, peak, usec / 1e6 if usec is not None else nsec / 1e9 if nsec is not None else None)

    def oom_killed(self) -> bool:
        """Whether the memory limit's OOM killer killed a process of this group."""
        memory = self._dir("memory")
        if memory is None:
            return False
        v2 = "memory" in self.layout.v2
        return (_stat_field(memory, "memory.events" if v2 else "memory.oom_control", "oom_kill") or 0) > 0

    def remove(self) -> bool:
        """rmdir the group in every hierarchy; True when none is left. Never raises. A group with
        members stays (the kernel refuses): kill and wait_empty first."""
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                os.rmdir(d)
        return not any(os.path.exists(d) for d in self.dirs.values())


def _device_rule(path: str) -> str:
    kind, major, minor = devices.number(path)
    return f"{kind} {major}:{minor} rwm"

"""Device walls on cgroup v2: a BPF device program per worker group (issue 29).

cgroup v2 has no devices controller. The kernel asks instead every ``BPF_PROG_TYPE_CGROUP_DEVICE``
program attached to a group (and to its ancestors, with ``BPF_F_ALLOW_MULTI``) whether a process
in it may open, read, write or ``mknod`` a device; one "no" is a no (EPERM). Container runtimes
(runc, crun) and systemd's ``DeviceAllow=`` work this way. Without it a job on a pure v2 server
opens every ``/dev/nvidiaN`` whatever ``CUDA_VISIBLE_DEVICES`` says.

The program here checks an ordered list of rules (first match wins, default allow): the job's own
GPU device files and the driver's control files allowed, every other minor of the GPUs' major
denied. It says nothing about the other devices, so what the parent group allows stays as it is.
The kernel checks device numbers, not paths: a node the job makes with ``mknod`` is refused too.

Standard library only (``ctypes`` for ``bpf(2)``, in ``node/bpf.py``): the supervisor builds and attaches the program
before its worker enters the group. The attached program lives as long as the group; nothing
needs to detach it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from gpupool.node import bpf
from gpupool.node.bpf import insn

# the program and attach types, from <linux/bpf.h>
_PROG_TYPE_CGROUP_DEVICE = 15
_CGROUP_DEVICE = 6
_DEV_BLOCK, _DEV_CHAR = 1, 2  # bpf_cgroup_dev_ctx.access_type & 0xffff


class Rule(NamedTuple):
    """One device rule; ``minor`` None matches every minor of ``major``."""

    allow: bool
    kind: str  # "c" (character) or "b" (block)
    major: int
    minor: int | None

    def __str__(self) -> str:
        minor = "*" if self.minor is None else self.minor
        return f"{'allow' if self.allow else 'deny'} {self.kind} {self.major}:{minor}"


def number(path: str) -> tuple[str, int, int]:
    """A device file's kind and numbers; OSError where ``path`` is not a device file."""
    st = os.stat(path)
    kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else None
    if kind is None:
        raise OSError(f"{path} is not a device file")
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev)


def gpu_rules(own: Sequence[str], others: Sequence[str], keep: Sequence[str]) -> list[Rule]:
    """The rules for a worker: its own GPU device files (``own``) and what every CUDA process
    needs (``keep``: ``nvidiactl``, ``nvidia-uvm``...) allowed; the node's other GPUs (``others``)
    denied, and with them every other minor of the GPUs' major, so a GPU whose file is missing
    from ``/dev`` is still out of reach. A ``keep`` file gets a rule only where its major is the
    GPUs' (``nvidiactl``): no rule denies the others (``nvidia-uvm``), so one allowing them would only
    lengthen the program. Files that vanished meanwhile are skipped."""
    found: dict[bool, list[Rule]] = {True: [], False: []}
    for paths, allow in ((own, True), (others, False)):
        for path in paths:
            with contextlib.suppress(OSError):
                found[allow].append(Rule(allow, *number(path)))
    majors = sorted({(rule.kind, rule.major) for rule in (*found[True], *found[False])})
    kept = []
    for path in keep:
        with contextlib.suppress(OSError):
            kind, major, minor = number(path)
            if (kind, major) in majors:
                kept.append(Rule(True, kind, major, minor))
    wildcard = [Rule(False, kind, major, None) for kind, major in majors]
    return _unique([*found[True], *kept, *found[False], *wildcard])


def program(rules: Iterable[Rule]) -> bytes:
    """The eBPF instructions of a device program that applies ``rules`` in order, first match
    wins, and allows what none matches."""
    code = [
        insn(0x61, 2, 1, 0, 0),  # r2 = ctx->access_type (u32)
        insn(0x54, 2, 0, 0, 0xFFFF),  # w2 &= 0xffff: the device type
        insn(0x61, 3, 1, 4, 0),  # r3 = ctx->major
        insn(0x61, 4, 1, 8, 0),  # r4 = ctx->minor
    ]
    for rule in rules:
        tests = [(2, _DEV_CHAR if rule.kind == "c" else _DEV_BLOCK), (3, rule.major)]
        if rule.minor is not None:
            tests.append((4, rule.minor))
        for i, (reg, value) in enumerate(tests):
            code.append(insn(0x55, reg, 0, len(tests) - i + 1, value))  # if rN != value: next rule
        code += [insn(0xB7, 0, 0, 0, int(rule.allow)), insn(0x95, 0, 0, 0, 0)]  # return allow
    code += [insn(0xB7, 0, 0, 0, 1), insn(0x95, 0, 0, 0, 0)]  # no rule matched: allow
    return b"".join(code)


def attach(group_dir: str, rules: Sequence[Rule]) -> None:
    """Load a program applying ``rules`` and attach it to the cgroup v2 group ``group_dir``; the
    parent's programs run too (``BPF_F_ALLOW_MULTI``): a job gets at most what its parent allows."""
    prog = bpf.load(_PROG_TYPE_CGROUP_DEVICE, program(rules), _CGROUP_DEVICE, b"gpupool_devices")
    try:
        bpf.attach(group_dir, prog, _CGROUP_DEVICE)
    finally:
        os.close(prog)


def usable(parent_dir: str) -> str | None:
    """None where device programs can be attached below ``parent_dir`` (a cgroup v2 group);
    else why not. Tried for real: a group is made below it, given an allow-all program, removed."""
    probe = os.path.join(parent_dir, f".device-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot make a group to try it in: {exc.strerror or exc}"
    try:
        attach(probe, [])
        return None
    except OSError as exc:
        return str(exc)
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)


def _unique(rules: list[Rule]) -> list[Rule]:
    seen: set[tuple[str, int, int | None]] = set()
    out = []
    for rule in rules:  # the first rule for a device decides; later ones could never match
        if (rule.kind, rule.major, rule.minor) not in seen:
            seen.add((rule.kind, rule.major, rule.minor))
            out.append(rule)
    return out

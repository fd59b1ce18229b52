"""The few ``bpf(2)`` calls gpupool makes, through ctypes: load a program, attach it to a cgroup,
detach what is attached there, and keep hash maps (``node/devices.py``, ``node/netwall.py``).

Programs are written as instructions here, with labels for jumps (``asm``), not compiled: the node
needs no compiler, no libbpf and no bpftool, and the supervisor stays standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from collections.abc import Sequence
from functools import cache

MAP_CREATE, MAP_LOOKUP, MAP_UPDATE, MAP_DELETE = 0, 1, 2, 3
PROG_LOAD, PROG_ATTACH, PROG_DETACH = 5, 8, 9
PROG_GET_FD_BY_ID, PROG_QUERY = 13, 16
MAP_HASH = 1
MAP_NO_PREALLOC = 1  # entries are allocated as they are put, not all at once
F_ALLOW_MULTI = 2  # the group's parents' programs run too
_SYSCALL = {"x86_64": 321, "aarch64": 280, "arm64": 280, "ppc64le": 361, "s390x": 351}
_LOG_SIZE = 1 << 16


class BpfError(OSError):
    """The kernel refused a bpf() call."""


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def load_map(dst: int, fd: int) -> bytes:
    """``dst = map`` (a 16-byte instruction whose immediate is the map's file descriptor)."""
    return insn(0x18, dst, 1, 0, fd) + insn(0)


class Jump:
    """A jump to a label: ``code`` (BPF_JMP op | BPF_K or BPF_X), comparing ``dst`` with ``imm`` or ``src``."""

    def __init__(self, code: int, label: str, dst: int = 0, imm: int = 0, src: int = 0) -> None:
        self.code, self.label, self.dst, self.imm, self.src = code, label, dst, imm, src


class Label:
    def __init__(self, name: str) -> None:
        self.name = name


def asm(items: Sequence[bytes | Jump | Label]) -> bytes:
    """Instructions with their jumps resolved: offsets counted in 8-byte slots."""
    labels: dict[str, int] = {}
    at = 0
    for item in items:
        if isinstance(item, Label):
            labels[item.name] = at
        else:
            at += 1 if isinstance(item, Jump) else len(item) // 8
    out, at = [], 0
    for item in items:
        if isinstance(item, Label):
            continue
        if isinstance(item, Jump):
            out.append(insn(item.code, item.dst, item.src, labels[item.label] - at - 1, item.imm))
            at += 1
        else:
            out.append(item)
            at += len(item) // 8
    return b"".join(out)


def load(prog_type: int, insns: bytes, attach_type: int, name: bytes) -> int:
    """A loaded program's file descriptor; ``BpfError`` with the verifier's last word if refused.
    Loaded without the verifier's log first (asking for it costs a 64 KiB buffer and the verifier's
    writing on every launch); only a refused program is loaded again with it, to say why."""
    try:
        return _load(prog_type, insns, attach_type, name, None)
    except BpfError:
        pass
    log = ctypes.create_string_buffer(_LOG_SIZE)
    try:
        return _load(prog_type, insns, attach_type, name, log)
    except BpfError as exc:
        lines = log.value.decode(errors="replace").strip().splitlines()
        said = [line for line in lines if not line.startswith("processed ")]  # not the closing statistics
        raise BpfError(exc.errno, f"{exc.strerror}{': ' + said[-1] if said else ''}") from None


def _load(prog_type: int, insns: bytes, attach_type: int, name: bytes, log: ctypes.Array[ctypes.c_char] | None) -> int:
    code = ctypes.create_string_buffer(insns, len(insns))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack(
        "<IIQQIIQII16sII",
        prog_type,
        len(insns) // 8,
        ctypes.addressof(code),
        ctypes.addressof(license_),
        0 if log is None else 1,  # log_level: 1, the verifier says why it refuses
        0 if log is None else _LOG_SIZE,
        0 if log is None else ctypes.addressof(log),
        0,
        0,
        name[:15],
        0,
        attach_type,
    )
    return call(PROG_LOAD, attr, "loading a program")


def attach(group_dir: str, prog: int, attach_type: int) -> None:
    fd = os.open(group_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        call(PROG_ATTACH, struct.pack("<5I", fd, prog, attach_type, F_ALLOW_MULTI, 0), f"attaching to {group_dir}")
    finally:
        os.close(fd)


def detach_all(group_dir: str, attach_type: int) -> int:
    """Detach every program of ``attach_type`` attached to the group itself; how many were."""
    fd = os.open(group_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ids = (ctypes.c_uint32 * 64)()
        attr = struct.pack("<IIIIQI", fd, attach_type, 0, 0, ctypes.addressof(ids), 64)
        try:
            _, answered = call_out(PROG_QUERY, attr, "listing the group's programs")
        except BpfError:
            return 0
        count = struct.unpack_from("<I", answered, 24)[0]
        for prog_id in list(ids)[:count]:
            prog = call(PROG_GET_FD_BY_ID, struct.pack("<III", prog_id, 0, 0), "finding a program")
            try:
                call(PROG_DETACH, struct.pack("<5I", fd, prog, attach_type, 0, 0), f"detaching from {group_dir}")
            finally:
                os.close(prog)
        return int(count)
    finally:
        os.close(fd)


class HashMap:
    """A BPF hash map of fixed-size keys and values (``struct`` formats)."""

    def __init__(self, key: str, value: str, entries: int) -> None:
        self.key, self.value = struct.Struct(key), struct.Struct(value)
        attr = struct.pack("<5I", MAP_HASH, self.key.size, self.value.size, entries, MAP_NO_PREALLOC)
        self.fd = call(MAP_CREATE, attr, "a map")

    def put(self, key: tuple[int, ...], value: tuple[int, ...]) -> None:
        k = ctypes.create_string_buffer(self.key.pack(*key), self.key.size)
        v = ctypes.create_string_buffer(self.value.pack(*value), self.value.size)
        call(MAP_UPDATE, struct.pack("<IIQQQ", self.fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0), "map update")

    def get(self, key: tuple[int, ...]) -> tuple[int, ...] | None:
        k = ctypes.create_string_buffer(self.key.pack(*key), self.key.size)
        v = ctypes.create_string_buffer(self.value.size)
        try:
            call(MAP_LOOKUP, struct.pack("<IIQQQ", self.fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0), "lookup")
        except BpfError:
            return None  # not there
        return tuple(self.value.unpack(v.raw))

    def drop(self, key: tuple[int, ...]) -> None:
        k = ctypes.create_string_buffer(self.key.pack(*key), self.key.size)
        with contextlib.suppress(BpfError):  # not there
            call(MAP_DELETE, struct.pack("<IIQ", self.fd, 0, ctypes.addressof(k)), "map delete")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def call(cmd: int, attr: bytes, doing: str) -> int:
    return call_out(cmd, attr, doing)[0]


def call_out(cmd: int, attr: bytes, doing: str) -> tuple[int, bytes]:
    """bpf(cmd, attr): its result and the attribute block as the kernel left it."""
    number = _SYSCALL.get(os.uname().machine)
    if number is None:
        raise BpfError(0, f"{doing}: bpf() is not known on {os.uname().machine}")
    buf = ctypes.create_string_buffer(attr, len(attr))
    result = int(libc().syscall(number, cmd, buf, len(attr)))
    if result < 0:
        raise libc_error(doing, BpfError)
    return result, buf.raw


@cache
def libc() -> ctypes.CDLL:
    """The C library with its errno kept for ``libc_error``: ``bpf(2)`` here, ``unshare``,
    ``setns`` and ``mount`` in ``node/jobns.py``."""
    return ctypes.CDLL(None, use_errno=True)


def libc_error(doing: str, kind: type[OSError] = OSError) -> OSError:
    """The error of the C library call that just failed, saying what was being done."""
    err = ctypes.get_errno()
    return kind(err, f"{doing}: {os.strerror(err)}")

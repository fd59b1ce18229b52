"""A worker in its image's root file system (issue 32), entered between fork and exec.

The way enroot and Apptainer run an image fits the supervisor as it is: after the worker entered
its cgroup and the job's private mount namespace (``node/jobns.py``), and before it drops to its
owner's account, it builds a root of its own and moves into it with ``pivot_root``:

- an overlay whose lower layer is the image's unpacked root (read-only, shared by every job of
  that image) and whose upper layer is a fresh tmpfs bounded by ``upper_bytes``: what a job writes
  to ``/`` is charged to its memory cgroup and gone with it, and the image is never changed;
- a ``/proc`` of its own (``hidepid=2`` where the kernel keeps the options per mount), a ``/dev``
  with only the usual pseudo-devices, a private ``devpts``, the job's ``/dev/shm`` and the device
  nodes the job may open (its GPUs, ``nvidiactl``, ``nvidia-uvm``), ``/sys`` read-only, the job's
  private ``/tmp``;
- the host paths the job needs bound at the same place (working directory, home, checkpoint
  directory, the driver's libraries and binaries), and ``/etc/passwd``, ``/etc/group``,
  ``/etc/hosts`` and ``/etc/resolv.conf`` so its owner has a name and the network (the host's)
  resolves.

``pivot_root``, not ``chroot``: the namespace's root itself changes, so the other workers of a gang
on this node, which join the namespace with ``setns``, land in the same root (``joined`` checks it).

Every path inside the new root is resolved by walking it one component at a time from the root's
file descriptor, its symbolic links taken relative to that root: an image whose ``/etc`` or
``/home`` is a link to a host path cannot make root write or mount outside it. Mounts then target
``/proc/self/fd/N``, the resolved directory itself.

Standard library only (``ctypes`` through the C library handle ``node/bpf.py`` keeps): the
supervisor runs it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import stat
import subprocess
import time
from typing import Any, NamedTuple

from gpupool.node import jobns
from gpupool.node.bpf import libc, libc_error

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_SLAVE = 32, 4096, 16384, 1 << 19
MNT_DETACH = 2
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
CLONE_NEWNS = 0x00020000
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41, "ppc64le": 203, "s390x": 217}
PSEUDO = ("null", "zero", "full", "random", "urandom", "tty")  # bound from the host's /dev
DEV_LINKS = {"fd": "/proc/self/fd", **{n: f"/proc/self/fd/{i}" for i, n in enumerate(("stdin", "stdout", "stderr"))}}
JOIN_WAIT_S = 10.0  # how long a gang member waits for the first worker to finish building the root
DRIVER_BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
LINKER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64")


class ContainerSpec(NamedTuple):
    """How a worker's root is built (it rides in the RunSpec, as JSON)."""

    root: str  # the image's unpacked root (read-only, shared by every job of the image)
    devices: tuple[str, ...] = ()  # device nodes the job may open: into /dev (at /dev/NAME when not under /dev)
    binds: tuple[str, ...] = ()  # host paths bound at the same place (a link is made as the same link)
    passwd: str = ""  # the owner's /etc/passwd line
    group: str = ""  # its /etc/group lines
    upper_bytes: int = 1 << 30  # the writable layer's bound (a tmpfs: charged to the job's memory cgroup)

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "devices": list(self.devices), "binds": list(self.binds)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ContainerSpec:
        return cls(
            root=str(data["root"]),
            devices=tuple(str(d) for d in data.get("devices") or ()),
            binds=tuple(str(b) for b in data.get("binds") or ()),
            passwd=str(data.get("passwd") or ""),
            group=str(data.get("group") or ""),
            upper_bytes=int(data.get("upper_bytes") or cls._field_defaults["upper_bytes"]),
        )


def enter(spec: ContainerSpec, *, unshare: bool = False) -> None:
    """Build the root and move into it (as root, between fork and exec); the working directory is
    then ``/``. ``unshare``: make a mount namespace first (the worker has none from ``jobns``); its
    ``/tmp`` and ``/dev/shm`` are then fresh tmpfs mounts, not the host's. Raises OSError naming
    the step that failed: the worker must not start outside its root."""
    if "," in spec.root or ":" in spec.root:
        raise OSError(f"an image root with ',' or ':' in its path cannot be an overlay layer: {spec.root}")
    if unshare:
        if libc().unshare(CLONE_NEWNS) != 0:
            raise libc_error("unshare(CLONE_NEWNS)")
        _mount(None, "/", None, MS_REC | MS_SLAVE, None)
    with contextlib.ExitStack() as fds:
        lower = _open(spec.root, fds)
        # The writable layer's tmpfs goes over the image's own path, in this namespace only: the
        # overlay reads the image through the descriptor opened before.
        mode = os.stat(lower).st_mode & 0o7777
        _mount("tmpfs", spec.root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec.upper_bytes},mode=0700")
        for name in ("upper", "work", "merged"):
            os.mkdir(os.path.join(spec.root, name), 0o700)
        os.chmod(os.path.join(spec.root, "upper"), mode)
        layers = f"lowerdir=/proc/self/fd/{lower},upperdir={spec.root}/upper,workdir={spec.root}/work"
        _mount("overlay", f"{spec.root}/merged", "overlay", MS_NOSUID | MS_NODEV, layers)
        new = _open(f"{spec.root}/merged", fds)
        _etc(new, spec, fds)  # before anything is mounted inside: no write can reach a host path
        _special(new, spec, fds, private=not unshare)
        for path in sorted(set(spec.binds), key=len):
            _bind(new, path, fds)
        os.fchdir(new)
    _pivot()


def joined(spec: ContainerSpec, wait_s: float = JOIN_WAIT_S) -> None:
    """In a gang member that joined the namespace with ``setns``: check that it is in the root
    the first worker built (``pivot_root`` moves it there even if it joined before the move).
    Waits up to ``wait_s`` for the first worker to finish; OSError if it never does."""
    deadline = time.monotonic() + wait_s
    while not _inside(spec):
        if time.monotonic() > deadline:
            raise OSError("the gang's first worker on this node did not finish building the job's root")
        time.sleep(0.01)
    os.chdir("/")


def driver_files() -> tuple[str, ...]:
    """The node's NVIDIA user-space driver files, as NVIDIA's CDI generator finds them: every
    library named ``*.so.<driver version>`` in the linker's directories, the links to them
    (``libcuda.so.1``), and ``nvidia-smi`` and friends; () where no driver is loaded."""
    version = _driver_version()
    if version is None:
        return ()
    search = f"{os.environ.get('PATH', '/usr/bin:/bin')}:/usr/local/nvidia/bin"
    return _driver_files_in(version, _linker_dirs(), search)


def _driver_files_in(version: str, dirs: list[str], search: str) -> tuple[str, ...]:
    found: list[str] = []
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        libs = [os.path.join(folder, n) for n in names if n.endswith(f".so.{version}")]
        real = {os.path.realpath(lib) for lib in libs}
        for name in names if libs else ():
            path = os.path.join(folder, name)
            if path in libs or (os.path.islink(path) and ".so" in name and os.path.realpath(path) in real):
                found.append(path)
    for binary in DRIVER_BINARIES:
        exe = shutil.which(binary, path=search)
        if exe is not None and exe not in found:
            found.append(exe)
    return tuple(found)


def _driver_version() -> str | None:
    for source in ("/sys/module/nvidia/version", "/proc/driver/nvidia/version"):
        with contextlib.suppress(OSError):
            with open(source) as f:
                words = f.read().split()
            # "580.159.04" alone in /sys; "... Kernel Module  580.159.04  Release Build ..." in /proc
            found = [w for w in words if w.count(".") in (1, 2) and w.replace(".", "").isdigit()]
            if found:
                return found[0]
    return None


def _linker_dirs() -> list[str]:
    """The directories the dynamic linker searches (``ldconfig -p``), the usual ones first."""
    dirs = [d for d in LINKER_DIRS if os.path.isdir(d)]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10, check=False).stdout
        for line in out.splitlines():
            if "=>" in line:
                folder = os.path.dirname(line.rsplit("=>", 1)[1].strip())
                if folder and folder not in dirs and os.path.realpath(folder) not in map(os.path.realpath, dirs):
                    dirs.append(folder)
    return dirs


def _etc(new: int, spec: ContainerSpec, fds: contextlib.ExitStack) -> None:
    """The owner's account lines over any of the image's with the same name or number; the host's
    ``/etc/hosts`` and ``/etc/resolv.conf`` (host networking)."""
    etc = _resolve(new, "/etc", fds)
    _write(etc, "passwd", _merged(_read(etc, "passwd"), spec.passwd.splitlines(), (0, 2)))
    _write(etc, "group", _merged(_read(etc, "group"), spec.group.splitlines(), (0, 2)))
    for name in ("hosts", "resolv.conf"):
        with contextlib.suppress(OSError), open(f"/etc/{name}", "rb") as f:
            _write(etc, name, f.read())


def _merged(image: bytes, own: list[str], keys: tuple[int, ...]) -> bytes:
    taken = {(k, line.split(":")[k]) for line in own for k in keys if len(line.split(":")) > max(keys)}
    kept = [
        line
        for line in image.decode(errors="replace").splitlines()
        if not any((k, f) in taken for k, f in enumerate(line.split(":")) if k in keys)
    ]
    return "".join(f"{line}\n" for line in [*kept, *own] if line).encode()


def _special(new: int, spec: ContainerSpec, fds: contextlib.ExitStack, *, private: bool) -> None:
    """/proc, /dev, /sys and /tmp inside the new root."""
    hide = "hidepid=2" if jobns.hidepid_usable() else None
    _mount("proc", _at(_resolve(new, "/proc", fds)), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, hide)
    dev = _resolve(new, "/dev", fds)
    _mount("tmpfs", _at(dev), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=1m,mode=0755")
    dev = _resolve(new, "/dev", fds)  # the tmpfs now on it
    for name in PSEUDO:
        _mount(f"/dev/{name}", _at(_make_file(dev, name, fds)), None, MS_BIND, None)
    pts = _resolve(dev, "pts", fds)
    _mount("devpts", _at(pts), "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    os.symlink("pts/ptmx", "ptmx", dir_fd=dev)
    for name, target in DEV_LINKS.items():
        os.symlink(target, name, dir_fd=dev)
    for path in spec.devices:
        inside = path[len("/dev/") :] if path.startswith("/dev/") else os.path.basename(path)
        _mount(path, _at(_make_file(dev, inside, fds)), None, MS_BIND, None)
    _mount("/sys", _at(_resolve(new, "/sys", fds)), None, MS_BIND | MS_REC, None)
    read_only = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    _mount(None, _at(_resolve(new, "/sys", fds)), None, read_only, None)
    for path in ("/tmp", "/dev/shm"):
        where = _at(_resolve(new, path, fds))
        if private:  # the job's own, from jobns
            _mount(path, where, None, MS_BIND | MS_REC, None)
        else:
            _mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec.upper_bytes},mode=1777")


def _bind(new: int, path: str, fds: contextlib.ExitStack) -> None:
    """A host path at the same place: a directory or a file bound, a link made as the same link
    (the driver's ``libcuda.so.1 -> libcuda.so.580.x``)."""
    st = os.lstat(path)
    parent, name = os.path.split(os.path.normpath(path))
    if not name:
        raise OSError(f"cannot bind {path} over the image's root")
    where = _resolve(new, parent, fds)
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=where)
        os.symlink(os.readlink(path), name, dir_fd=where)
        return
    target = _resolve(where, name, fds) if stat.S_ISDIR(st.st_mode) else _make_file(where, name, fds)
    _mount(path, _at(target), None, MS_BIND | MS_REC, None)


def _pivot() -> None:
    """Make the current directory the namespace's root, stack the old root under it, detach it."""
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: unknown system call number on {os.uname().machine}")
    if libc().syscall(ctypes.c_long(number), b".", b".") != 0:
        raise libc_error("pivot_root")
    if libc().umount2(b".", MNT_DETACH) != 0:
        raise libc_error("unmounting the host's root")
    os.chdir("/")


def _inside(spec: ContainerSpec) -> bool:
    """Whether ``/`` is an overlay holding the owner's passwd line: a root ``enter`` built."""
    try:
        with open("/proc/self/mountinfo") as f:
            tops = [line.split(" - ", 1) for line in f if line.split()[4] == "/"]
        with open("/etc/passwd") as f:
            names = f.read().splitlines()
    except (OSError, IndexError):
        return False
    is_overlay = bool(tops) and len(tops[-1]) == 2 and tops[-1][1].startswith("overlay ")
    return is_overlay and all(line in names for line in spec.passwd.splitlines())


def _resolve(base: int, path: str, fds: contextlib.ExitStack, hops: int = 0) -> int:
    """The directory ``path`` under ``base`` (the new root, or a directory in it), made where
    missing, every link followed as if ``base``'s root were ``/``; an ``O_PATH`` descriptor."""
    here = os.dup(base)
    fds.callback(os.close, here)
    parts = [p for p in path.split("/") if p and p != "."]
    trail = [here]
    while parts:
        part = parts.pop(0)
        if part == "..":
            if len(trail) > 1:
                trail.pop()
            continue
        try:
            st = os.lstat(part, dir_fd=trail[-1])
        except FileNotFoundError:
            os.mkdir(part, 0o755, dir_fd=trail[-1])
            st = os.lstat(part, dir_fd=trail[-1])
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                raise OSError(f"too many links resolving {path} in the image")
            link = os.readlink(part, dir_fd=trail[-1])
            if link.startswith("/"):
                del trail[1:]
            parts = [p for p in link.split("/") if p and p != "."] + parts
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(f"{path} is not a directory in the image")
        fd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=trail[-1])
        fds.callback(os.close, fd)
        trail.append(fd)
    return trail[-1]


def _make_file(folder: int, rel: str, fds: contextlib.ExitStack) -> int:
    """An empty file to mount on at ``rel`` under ``folder`` (one there is kept); its descriptor."""
    parent, name = os.path.split(rel)
    where = _resolve(folder, parent, fds) if parent else folder
    with contextlib.suppress(FileExistsError):
        os.close(os.open(name, _NEW, 0o644, dir_fd=where))
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=where)
    fds.callback(os.close, fd)
    if stat.S_ISLNK(os.fstat(fd).st_mode) or stat.S_ISDIR(os.fstat(fd).st_mode):
        raise OSError(f"{rel} in the image is a link or a directory: cannot put a file there")
    return fd


def _read(folder: int, name: str) -> bytes:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:  # missing, or a link (not followed as root): the image's is not used
        return b""
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _write(folder: int, name: str, content: bytes | str) -> None:
    """A new file ``name`` (0644) in the writable layer, replacing the image's, never through a link."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)
    fd = os.open(name, _NEW, 0o644, dir_fd=folder)
    with os.fdopen(fd, "wb") as f:
        f.write(content.encode() if isinstance(content, str) else content)


def _open(path: str, fds: contextlib.ExitStack) -> int:
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    fds.callback(os.close, fd)
    return fd


def _at(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if libc().mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        raise libc_error(f"mount {fstype or source or 'propagation'} on {target}")

"""Files only their owner may read: the head's data dir and secrets, each worker's run directory
and log (docs/guide/what-a-job-sees.md).

Everything here belongs to the head's (the node runtime's) user, even when jobs run as their
owners: a job's run directory holds what its supervisor trusts (its process group, its exit), and
its owner reads the log through the head, which checks who asks.
"""

from __future__ import annotations

import contextlib
import locale
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("gpupool.private")

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path, *, below: Path | None = None) -> Path:
    """Create ``path`` 0700, with every missing directory on the way; those from ``below`` (itself
    included) down to ``path`` are made 0700 even if they already exist.

    With strings, not ``Path`` objects (issue 36: a launch makes three such calls on the
    controller's thread, and pathlib's parents cost more than the system calls); the directories
    it made are not looked at again, they are 0700 already."""
    levels = _levels(os.fspath(path))
    missing: list[str] = []
    for level in levels:
        if os.path.exists(level):
            break
        missing.append(level)
    for level in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another launch
            os.mkdir(level, DIR_MODE)
        os.chmod(level, DIR_MODE)  # whatever the umask
    top = None if below is None else os.fspath(below)
    if top is not None and (levels[0].startswith(top.rstrip("/") + "/") or Path(levels[0]).is_relative_to(top)):
        for i, level in enumerate(levels):
            if i >= len(missing):  # those it made are 0700
                tighten(level, DIR_MODE)
            if level == top:
                break
    return path


def _levels(path: str) -> list[str]:
    """``path`` then each of its parents, as ``(path, *Path(path).parents)`` names them."""
    found = [path]
    while (parent := os.path.dirname(found[-1]) or ".") != found[-1]:
        found.append(parent)
    return found


def tighten(path: str | Path, mode: int, *, warn: bool = False) -> bool:
    """Take away from ``path`` every permission bit beyond ``mode``; True if it had any. Nothing
    happens to a path that does not exist."""
    try:
        current = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return False
    if not current & ~mode:
        return False
    os.chmod(path, current & mode)
    if warn:
        log.warning("%s was mode %04o, readable by others; made it %04o", path, current, current & mode)
    return True


def private_file(path: Path) -> Path:
    """Create ``path`` empty and 0600 if it does not exist, else take away what goes beyond 0600.
    Whoever writes it later (append or truncate) keeps that mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        current = stat.S_IMODE(os.fstat(fd).st_mode)
        if current & ~FILE_MODE:
            os.fchmod(fd, current & FILE_MODE)
    finally:
        os.close(fd)
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``path`` 0600 from its first byte (a new file renamed over the old one), in the
    encoding ``open`` would use. With ``os.write``, not a text file object (issue 36: each launch's
    spec and power records, on the controller's thread)."""
    name = os.fspath(path)
    head, tail = os.path.split(name)
    tmp = os.path.join(head, f".{tail}.{os.getpid()}.tmp")
    data = memoryview(text.encode(locale.getpreferredencoding(False)))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    os.replace(tmp, name)


def secure_data_dir(data_dir: Path, secrets: tuple[str, ...]) -> None:
    """The head's data dir at start: 0700, created so or fixed (with a warning) if it was wider;
    each of ``secrets`` (names under it: tokens, the database) 0600 if it exists."""
    if data_dir.exists():
        tighten(data_dir, DIR_MODE, warn=True)
    else:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        private_dir(data_dir)
    for name in secrets:
        tighten(data_dir / name, FILE_MODE, warn=True)

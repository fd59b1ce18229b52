"""Reading and writing cgroup files, the way the kernel wants them (``node/cgroups.py``).

Standard library only: the supervisor imports it on every launch.
"""

from __future__ import annotations

import os


def write(path: str, value: str) -> None:
    """One write(2): cgroup files take a value per write call, not a stream."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    except OSError as exc:  # name the file: write(2) errors do not
        raise OSError(exc.errno, f"{exc.strerror} (writing {value!r})", path) from None
    finally:
        os.close(fd)


def read(*parts: str | None) -> str | None:
    """A cgroup file's text, stripped; None where it (or its directory) is not there."""
    if None in parts:
        return None
    try:
        with open(os.path.join(*(p for p in parts if p is not None))) as f:
            return f.read().strip()
    except OSError:
        return None


def read_int(directory: str | None, name: str) -> int | None:
    text = read(directory, name)
    return int(text) if text and text.isdigit() else None


def stat_field(directory: str | None, name: str, key: str) -> int | None:
    """``key N`` from a flat-keyed file (cpu.stat, memory.events, memory.oom_control)."""
    for line in (read(directory, name) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return None

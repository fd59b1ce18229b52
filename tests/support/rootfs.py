"""A root file system for container tests, made from this machine's own files (no network).

``build(dest)`` copies (hard links where it can) ``python3`` and its standard library, ``sh`` and a
few coreutils, and every library ``ldd`` names for them, into ``dest`` laid out as Debian lays out
its own root (``/bin``, ``/lib``, ``/lib64`` links into ``/usr``), so the container's path
resolution meets the links a real image has. An ``/etc/passwd`` with root only, and the empty
directories an image carries. About 26 MB; a second, hard-linked build takes well under a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS = (
    "sh",
    "id",
    "cat",
    "ls",
    "stat",
    "readlink",
    "touch",
    "sleep",
    "head",
    "pwd",
    "mkdir",
    "env",
    "tr",
    "grep",
    "date",
)
SKIP = {"test", "idlelib", "tkinter", "ensurepip", "lib2to3", "pydoc_data", "dist-packages", "site-packages"}
PYTHON = "/usr/bin/python3"


def build(dest: Path) -> Path:
    """A root at ``dest`` (made 0755, owned by root as an image's is); returns ``dest``."""
    dest.mkdir(mode=0o755, parents=True, exist_ok=True)
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
        (dest / "usr" / target.split("/")[1]).mkdir(parents=True, exist_ok=True)
        if not (dest / link).is_symlink():
            (dest / link).symlink_to(target)
    for name in ("etc", "tmp", "proc", "sys", "dev", "root", "home", "var"):
        (dest / name).mkdir(exist_ok=True)
    (dest / "var" / "tmp").mkdir(exist_ok=True)
    for sticky in ("tmp", "var/tmp"):
        (dest / sticky).chmod(0o1777)
    (dest / "root").chmod(0o700)
    (dest / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (dest / "etc" / "group").write_text("root:x:0:\n")
    python = os.path.realpath(PYTHON)
    binaries = [python, *(shutil.which(t) or f"/bin/{t}" for t in TOOLS)]
    for binary in binaries:
        _put(binary, dest)
        for lib in _libraries(binary):
            _put(lib, dest)
    if not (dest / "usr/bin/python3").exists():
        (dest / "usr/bin/python3").symlink_to(os.path.basename(python))
    stdlib = subprocess.run(
        [PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for folder, subdirs, files in os.walk(stdlib):
        subdirs[:] = [d for d in subdirs if d not in SKIP and not d.startswith("config-")]
        for name in files:
            _put(os.path.join(folder, name), dest)
    return dest


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        path = (
            parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts and parts[0].startswith("/") else None
        )
        if path and path.startswith("/"):
            found.append(path)
    return found


def _put(path: str, dest: Path) -> None:
    """``path`` at the same place under ``dest``, by its real location (``/lib/x`` is ``/usr/lib/x``
    on a merged-usr host), with a link at the name it was asked by when that differs."""
    real = os.path.realpath(path)
    target = dest / real.lstrip("/")
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(real, target)
        except OSError:
            shutil.copy2(real, target)
    asked = dest / os.path.realpath(os.path.dirname(path)).lstrip("/") / os.path.basename(path)
    if asked != target and not asked.exists() and not asked.is_symlink():
        asked.parent.mkdir(parents=True, exist_ok=True)
        asked.symlink_to(os.path.basename(real) if asked.parent == target.parent else real)


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))

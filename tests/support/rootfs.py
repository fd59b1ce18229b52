"""A root file system for container tests, made from this machine's own files (no network).

``build(dest)`` copies (hard links where it can) ``python3`` and its standard library, ``sh`` and a
few coreutils, and every library ``ldd`` names for them, into ``dest`` laid out as Debian lays out
its own root (``/bin``, ``/lib``, ``/lib64`` links into ``/usr``), so the container's path
resolution meets the links a real image has. An ``/etc/passwd`` with root only, and the empty
directories an image carries. About 26 MB; a second, hard-linked build takes well under a second.

``add_torch(dest)`` then puts the test run's own torch (and the packages ``import torch`` and DDP on
gloo load: torchgen, sympy, mpmath, typing_extensions, numpy) in the image python's
site-packages, with the system libraries its extension modules need, less what a CPU training job
never loads (torch's C++ headers, test binaries and test packages): about 0.65 GB, most of it
libtorch_cpu.so.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
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
# What torch 2.x imports on a CPU DDP run besides itself; numpy (and its own libraries) since
# broadcast_object_list, which the example resumes with, pickles through it.
TORCH_PACKAGES = ("torch", "torchgen", "sympy", "mpmath", "typing_extensions.py", "numpy", "numpy.libs")
# Never loaded by training: C++ headers, test programs and libraries, packages' own test suites.
TORCH_PRUNE = {"torch/include", "torch/test", "torch/share/cmake"}
TORCH_PRUNE_NAMES = {"tests", "libjitbackend_test.so", "libtorchbind_test.so", "libaoti_custom_ops.so"}
TORCH_BIN_KEEP = {"torch_shm_manager"}  # torch/bin: the one program torch runs (multiprocessing's shared memory)


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


def torch_mismatch() -> str | None:
    """Why this run's torch cannot go into the image (None: it can): not installed, or built for
    another python than the image's (its extension modules would not load)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "torch is not installed"
    image_suffix = _ask("import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
    if image_suffix != sysconfig.get_config_var("EXT_SUFFIX"):
        return f"torch is built for {sys.version.split()[0]}, the image's {PYTHON} wants *{image_suffix}"
    return None


def add_torch(dest: Path, base: Path | None = None) -> Path:
    """Put this run's torch under ``dest`` where the image's python finds it without a PYTHONPATH
    (its site-packages, as ``pip install torch`` in a Debian image puts it), with the libraries its
    extension modules need that ``base`` (a ``build`` root this one goes over, as a second layer)
    does not hold; returns that site-packages. Check ``torch_mismatch()`` first."""
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations, "torch is not installed"
    source = Path(next(iter(spec.submodule_search_locations))).parent
    site = dest / _ask("import site; print(site.getsitepackages()[0])").lstrip("/")
    site.mkdir(parents=True, exist_ok=True)

    def skipped(folder: str, names: list[str]) -> set[str]:
        here = Path(folder).relative_to(source).as_posix()
        gone = {n for n in names if n in TORCH_PRUNE_NAMES or f"{here}/{n}" in TORCH_PRUNE}
        return gone | ({n for n in names if n not in TORCH_BIN_KEEP} if here == "torch/bin" else set())

    for name in TORCH_PACKAGES:
        if (source / name).is_dir():
            shutil.copytree(source / name, site / name, ignore=skipped, copy_function=_link, dirs_exist_ok=True)
        else:
            _link(str(source / name), str(site / name))
    # torch's own libraries come by its RPATH; ctypes (``import torch`` loads it) needs libffi.
    dynload = Path(_ask("import sysconfig; print(sysconfig.get_path('platstdlib'))"), "lib-dynload")
    extensions = [*site.rglob("*.so*"), *dynload.glob("_ctypes.*.so")]
    needed = {lib for so in extensions for lib in _libraries(str(so)) if not lib.startswith(str(dest))}
    for lib in sorted(needed):
        if base is None or not (base / os.path.realpath(lib).lstrip("/")).exists():
            _put(lib, dest)
    return site


def _ask(code: str) -> str:
    """What the image's python prints running ``code``."""
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


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

"""A runnable OCI image made from this machine's own files (no network, no registry): the root
``tests/support/rootfs.py`` builds (python3, sh, a few tools, their libraries), as one layer of an
OCI layout or archive, with an ``ENV``, ``Cmd`` and ``WorkingDir`` the tests check; and that image
with a second layer holding this run's torch and the DDP example, for a job that really trains."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

from tests.support import oci, rootfs

ENV = ("IMAGE_VAR=from-image", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8")
CMD = ("sh", "-c", "echo CMD=image-default")


def python_layer(root: Path) -> bytes:
    """The root ``rootfs.build`` made at ``root``, as an uncompressed layer."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(root.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    return buffer.getvalue()


def python_image(workdir: Path, *, archive: bool = False, tag: str = "latest", inside: str = "/") -> str:
    """A python image under ``workdir``: the ``--image`` reference to give (``oci:`` or ``oci-archive:``).
    ``inside``: its WorkingDir."""
    layer = python_layer(rootfs.build(workdir / "rootfs"))
    if archive:
        path = workdir / "python.tar"
        oci.write_archive(path, [layer], env=ENV, cmd=CMD, workdir=inside)
        return f"oci-archive:{path}"
    oci.write_layout(workdir / "layout", [layer], env=ENV, cmd=CMD, workdir=inside, tag=tag)
    return f"oci:{workdir / 'layout'}:{tag}"


TORCH_EXAMPLE = "/opt/examples/ddp_train.py"  # where torch_image puts examples/ddp_train.py
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def torch_image(workdir: Path) -> str:
    """The python image under ``workdir`` with a second layer: this run's torch where the image's
    python finds it (``rootfs.add_torch``, about 0.65 GB uncompressed) and examples/ddp_train.py at
    ``TORCH_EXAMPLE``; the ``oci:`` reference. Check ``rootfs.torch_mismatch()`` first."""
    base = rootfs.build(workdir / "rootfs")
    upper = workdir / "torch-layer"
    rootfs.add_torch(upper, base)
    example = upper / TORCH_EXAMPLE.lstrip("/")
    example.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(EXAMPLES / "ddp_train.py", example)
    layers = [python_layer(base), python_layer(upper)]
    oci.write_layout(workdir / "torch-layout", layers, env=ENV, cmd=CMD, workdir="/")
    return f"oci:{workdir / 'torch-layout'}:latest"


def padding_layer(megabytes: int, files: int = 16) -> bytes:
    """A gzip'd layer of ``files`` random files under /pad, ``megabytes`` MB in all: an image made
    bigger with content nothing compresses, as model weights or a CUDA stack would be, to measure
    an unpack by its size (benchmarks/image_start.py)."""
    each = megabytes * 1_000_000 // files
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        pad = tarfile.TarInfo("pad")
        pad.type, pad.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(pad)
        for index in range(files):
            member = tarfile.TarInfo(f"pad/blob-{index:02d}")
            member.size, member.mode = each, 0o644
            tar.addfile(member, io.BytesIO(os.urandom(each)))
    return gzip.compress(buffer.getvalue(), compresslevel=1, mtime=0)


@contextlib.contextmanager
def image_place(name: str) -> Iterator[Path]:
    """A directory for a test's images and work, removed afterwards: under /var/tmp, not /tmp,
    since a worker's /tmp is its own before it enters its image's root."""
    path = Path(f"/var/tmp/gpupool-{name}-{os.getpid()}")
    path.mkdir(mode=0o755, exist_ok=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)

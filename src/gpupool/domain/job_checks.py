"""The checks ``JobSpec.create`` makes of a submission's parts, one function each, so the
one place that validates a job stays readable."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from gpupool.domain import bounds
from gpupool.domain.errors import InvalidInput
from gpupool.domain.resources import parse_memory


def command(command: Sequence[str], image: str | None) -> tuple[str, ...]:
    """The command, which may be empty only with an image (its Entrypoint and Cmd then run)."""
    argv = tuple(command)
    if image is not None:
        image_ref(image)
    if not argv and image is not None:
        return argv
    if not argv or not argv[0].strip():
        raise InvalidInput("empty command: give the command after --, e.g. gpupool submit -- python train.py")
    bounds.command(argv)
    return argv


def image_ref(text: str) -> str:
    """An image reference in one of its forms (``domain/images.py``); its form only, not whether a
    node can get it."""
    from gpupool.domain import images  # with its dataclasses, only for a job that names an image

    try:
        images.parse_ref(text)
    except images.BadImageRef as exc:
        raise InvalidInput(f"--image: {exc}") from None
    return text


def gpu_power(text: str | None, gpus: float) -> str | None:
    """A power mode in its stored form (``domain/power.py``); only for a job with GPUs."""
    if text is None:
        return None
    if gpus == 0:
        raise InvalidInput("--gpu-power needs GPUs: a job without GPUs has no GPU power to set")
    from gpupool.domain.power import parse_mode  # and launch's types: only for a job that sets it

    return parse_mode(text).text


def memory(what: str, value: str | int | None) -> int:
    mib = parse_memory(value)
    if mib > bounds.MAX_MEMORY_MIB:
        raise InvalidInput(f"{what} must be at most {bounds.MAX_MEMORY_MIB // 2**20} TiB per worker")
    return mib


def check_workdir(workdir: str | None) -> None:
    bounds.path("workdir", workdir)
    if workdir is not None and not posixpath.isabs(workdir):
        raise InvalidInput(
            f"workdir {bounds.shown(workdir)} must be an absolute path: a job starts on a node, not where"
            " it was submitted from (gpupool submit resolves a relative --workdir where it runs)"
        )


def checkpoint_dir(path: str | None, workdir: str | None) -> str | None:
    """An absolute, normalised path; a relative one is taken from the job's (absolute) workdir."""
    if path is None:
        return None
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput("checkpoint dir must be a non-empty path, e.g. /data/ckpt/run1")
    if "\x00" in path:
        raise InvalidInput("checkpoint dir must not contain NUL bytes")
    if path.startswith("~"):
        raise InvalidInput(f"checkpoint dir {path!r}: '~' is not expanded here; give an absolute path")
    if not posixpath.isabs(path):
        if not workdir or not posixpath.isabs(workdir):
            raise InvalidInput(
                f"checkpoint dir {path!r} is relative and the job has no absolute workdir to take it from; "
                "give an absolute path"
            )
        path = posixpath.join(workdir, path)
    path = posixpath.normpath(path)
    if path.startswith("//"):  # normpath keeps a leading '//' (POSIX leaves its meaning open)
        path = "/" + path.lstrip("/")
    if len(path) > bounds.MAX_PATH:
        raise InvalidInput(f"checkpoint dir is longer than {bounds.MAX_PATH} characters")
    return path


def default_name(argv: tuple[str, ...], image: str | None = None) -> str:
    if not argv:  # the image's own entrypoint: named after the image (pytorch for nvcr.io/nvidia/pytorch:24.10)
        from gpupool.domain import images

        return images.parse_ref(image or "job").location.rstrip("/").rsplit("/", 1)[-1][:64] or "job"
    base = argv[0].rsplit("/", 1)[-1]
    if base.startswith("python") and len(argv) > 1 and not argv[1].startswith("-"):
        base = argv[1].rsplit("/", 1)[-1]
    return base[:64] or "job"

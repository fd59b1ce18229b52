"""Starting a worker in its image (issue 32): what the node runtime asks for, and what the
supervisor does with it before the worker starts.

The runtime writes an ``ImageJob`` into the worker's spec: the reference, the node's cache and
its bound, and which environment variables are only the node's defaults. The supervisor (a
separate process per worker, so a pull never blocks the head or another job) gets the image
from the node's cache, pulling or unpacking it where needed with progress in the worker's log,
holds it against eviction for the worker's life, and fills in the rest of the spec: the image's
root for the container, the command (its Entrypoint, then the job's command or its Cmd), and the
environment (the image's ``ENV`` underneath the job's own and gpupool's variables; over the
node's defaults such as ``PATH``, which belong to the node's userland, not the image's).

Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import grp
import os
import pwd
from typing import Any, NamedTuple

from gpupool.node.container import ContainerSpec
from gpupool.node.images import ImageCache, ImageError


class ImageJob(NamedTuple):
    ref: str  # as the job asked (domain/images.py's forms)
    cache_dir: str  # the node's image cache
    cache_bytes: int  # its bound (gpupool up --image-cache)
    node_keys: tuple[str, ...] = ()  # variables that are only the node's defaults: the image's own win

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "node_keys": list(self.node_keys)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageJob:
        return cls(
            ref=str(data["ref"]),
            cache_dir=str(data["cache_dir"]),
            cache_bytes=int(data["cache_bytes"]),
            node_keys=tuple(str(k) for k in data.get("node_keys") or ()),
        )


class Started(NamedTuple):
    """What the supervisor runs once it has the image."""

    argv: tuple[str, ...]
    env: dict[str, str]
    root: str  # the image's unpacked root (read-only, shared)
    cwd: str | None  # where the worker starts inside the root
    digest: str
    hold: int  # a descriptor holding the image against eviction: closed when the worker is done


def start(job: ImageJob, argv: tuple[str, ...], env: dict[str, str], cwd: str | None, log: Any) -> Started:
    """Get the image and say how the worker runs in it; ImageError (one sentence) when it cannot."""

    def progress(line: str) -> None:
        log.write(f"gpupool: {line}\n".encode())

    cache = ImageCache(job.cache_dir, job.cache_bytes)
    try:
        progress(f"getting image {job.ref}")
        image = cache.get(job.ref, progress)
        hold = cache.hold(image)
    finally:
        cache.close()
    config = image.config
    command = tuple(config.entrypoint) + (argv or tuple(config.cmd))
    if not command:
        os.close(hold)
        raise ImageError(f"image {job.ref} has no Entrypoint or Cmd, and the job gave no command")
    merged = dict(env)
    for item in config.env:
        key, sep, value = item.partition("=")
        if sep and (key not in env or key in job.node_keys):
            merged[key] = value
    progress(f"running in image {job.ref} ({image.digest})")
    return Started(command, merged, image.root, cwd or config.workdir or None, image.digest, hold)


def container_for(
    account: Any,
    devices: tuple[str, ...],
    binds: tuple[str | None, ...],
    driver: tuple[str, ...],
    upper_bytes: int,
) -> ContainerSpec:
    """The container a worker of this node runs its image in, its root filled in by ``start``:
    the job's device files (its GPUs and the driver's own), the host paths it keeps (its working
    and checkpoint directories, its owner's home, the MPS pipe directory) and the node's driver
    files, bound at the same place; its owner in /etc/passwd and /etc/group (``account``: an
    ``accounts.Account``, or None for the node's own user)."""
    if account is None:
        entry = pwd.getpwuid(os.getuid())
        name, uid, gid, home, shell = entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir, entry.pw_shell
        groups: tuple[int, ...] = tuple(sorted({gid, *os.getgroups()}))
    else:
        name, uid, gid, home, shell, groups = (
            account.name,
            account.uid,
            account.gid,
            account.home,
            account.shell,
            tuple(account.groups),
        )
    lines = []
    for number in groups:
        try:
            lines.append(f"{grp.getgrgid(number).gr_name}:x:{number}:{name}")
        except KeyError:
            continue
    kept = tuple(dict.fromkeys(p for p in (*binds, home, *driver) if p and p != "/" and os.path.exists(p)))
    return ContainerSpec(
        root="",
        devices=devices,
        binds=kept,
        passwd=f"{name}:x:{uid}:{gid}::{home}:{shell or '/bin/sh'}",
        group="\n".join(lines),
        upper_bytes=upper_bytes,
    )

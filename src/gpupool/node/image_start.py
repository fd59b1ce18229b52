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

import contextlib
import grp
import json
import os
import pwd
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from gpupool.domain.launch import LaunchRequest
from gpupool.node.accounts import Account
from gpupool.node.container import ContainerSpec
from gpupool.node.image_job import ImageJob, write_phase
from gpupool.node.images import ImageCache, ImageError
from gpupool.node.jobns import Scratch


class Started(NamedTuple):
    """What the supervisor runs once it has the image."""

    argv: tuple[str, ...]
    env: dict[str, str]
    root: str  # the image's unpacked root (read-only, shared)
    cwd: str | None  # where the worker starts inside the root
    digest: str
    hold: int  # a descriptor holding the image against eviction: closed when the worker is done


def start(
    job: ImageJob,
    argv: tuple[str, ...],
    env: dict[str, str],
    cwd: str | None,
    account: Account | None,
    log: Any,
    run: Path,
) -> Started:
    """Get the image and say how the worker runs in it; ImageError (one sentence) when it cannot."""

    def progress(line: str) -> None:
        said = line if line.startswith("gpupool: ") else f"gpupool: {line}"  # the cache's own lines say it
        log.write(f"{said}\n".encode())
        write_phase(run, said.removeprefix("gpupool: "))  # the head reads it into the job's events

    cache = ImageCache(job.cache_dir, job.cache_bytes)
    personal = str(job.login["owner"]) if job.login else None
    try:
        progress(f"getting image {job.ref}")
        with pull_authfile(job) as cache.authfile:
            image = cache.get(job.ref, progress, reader=account, personal=personal)  # a path: read as the owner
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
    said = f"running in image {job.ref} ({image.digest})"
    log.write(f"gpupool: {said}\n".encode())
    write_phase(run, said, image.digest)
    return Started(command, merged, image.root, cwd or config.workdir or None, image.digest, hold)


@contextlib.contextmanager
def pull_authfile(job: ImageJob) -> Iterator[str | None]:
    """The credentials file a pull uses: the node's, with the owner's own login over it for its
    registry, in a file of root's alone (in the cache dir, 0711) that lasts only as long as the get."""
    if not job.login:
        yield job.authfile
        return
    auths: dict[str, Any] = {}
    if job.authfile:
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError), open(job.authfile) as node_file:
            auths = dict(json.load(node_file).get("auths") or {})
    auths.update(job.login["auths"])
    fd, path = tempfile.mkstemp(prefix=".login-", dir=job.cache_dir)  # 0600
    try:
        with os.fdopen(fd, "w") as out:
            json.dump({"auths": auths}, out)
        yield path
    finally:
        os.unlink(path)


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


REGISTRY_AUTH = "registry-auth.json"  # in a node's data dir: skopeo's --authfile for pulls (containers-auth.json)


class NodePlace(NamedTuple):
    """What of its node a worker's image part is made from."""

    device_dir: Path  # where the GPUs' device files are
    driver_files: tuple[str, ...]  # the node's NVIDIA driver files (container.driver_files)
    data_dir: Path  # the node's data dir: images/ and the registry credentials are there
    cache_bytes: int
    base_keys: tuple[str, ...]  # the variables of the node's base environment


def spec_part(
    req: LaunchRequest,
    env: dict[str, str],
    confined: dict[str, Any],
    account: Account | None,
    scratch: Scratch | None,
    node: NodePlace,
) -> dict[str, Any]:
    """The image part of a worker's spec: the supervisor gets the image, then starts the worker in
    a container of it that holds its GPUs' and the driver's device files, the paths it keeps, and
    the node's driver files. Inside, CUDA counts only the devices there: the worker's GPUs are
    0..n-1, whatever the node walls (``env`` is updated so)."""
    assert req.image is not None
    gpus = [str(node.device_dir / f"nvidia{g}") for g in req.gpus]
    devices = tuple(confined.get("devices_allow") or gpus) + tuple(confined.get("devices_keep") or ())
    devices = tuple(d for d in devices if os.path.exists(d))  # simulated GPUs have no device file
    if req.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(req.gpus)))
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    kept = (req.workdir, req.env.get("GPUPOOL_CHECKPOINT_DIR"), env.get("CUDA_MPS_PIPE_DIRECTORY"))
    upper = req.memory_mib * 2**20 or (scratch.size_bytes if scratch is not None else 1 << 30)
    box = container_for(account, devices, kept, node.driver_files, upper)
    node_keys = tuple(k for k in node.base_keys if k not in req.env)
    auth = node.data_dir / REGISTRY_AUTH  # the node's registry credentials, where an admin put them
    login = req.registry_auth
    job = ImageJob(
        req.image,
        str(node.data_dir / "images"),
        node.cache_bytes,
        node_keys,
        str(auth) if auth.exists() else None,
        None if login is None else {"owner": login.owner, "registry": login.registry, "auths": login.auth_entry()},
    )
    return {"container": box, "image": job}

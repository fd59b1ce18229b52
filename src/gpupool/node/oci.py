"""OCI images as files: references, layouts and archives, manifests (issue 32).

An image reaches a node as an OCI *layout* (a directory: ``oci-layout``, ``index.json``,
``blobs/sha256/...``), an OCI *archive* (a tar of a layout, as ``skopeo copy ... oci-archive:``
writes), or from a registry through ``skopeo`` into a layout (``node/images.py``). Every blob is
named by its digest and checked against it as it is read, so the manifest's digest names the whole
image: the cache keys unpacked roots by it.

Reading them is all this module does (pure but for reading the layout); applying layers safely is
``node/unpack.py``'s, keeping unpacked roots ``node/images.py``'s.

Standard library only: the supervisor imports it, and ``parse_ref`` (pure) is used by the head too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

from gpupool.domain import images as image_refs
from gpupool.node.accounts import Account

OCI_INDEX = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
REF_NAME = "org.opencontainers.image.ref.name"
WHITEOUT, OPAQUE = ".wh.", ".wh..wh..opq"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}")
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


class ImageError(Exception):
    """The image cannot be used: ``str(exc)`` is one sentence for the job's events."""


class ImageUnavailable(ImageError):
    """The node cannot get the image now (its path is not there, the registry does not answer, no
    skopeo): not the image's fault, so the job waits and is tried again, where a broken image fails it."""


class Ref(NamedTuple):
    """A parsed image reference. ``kind``: "layout" (a directory), "archive" (a tar of one) or
    "registry" (also a name imported on the node, which the cache looks up before pulling)."""

    kind: str
    location: str  # the absolute path, or the repository ("nvcr.io/nvidia/pytorch", "python")
    tag: str  # "" where none was given
    digest: str = ""  # registry references only: "sha256:<hex>" after "@"

    @property
    def text(self) -> str:
        """The canonical text: how the cache names the image ("python" is "python:latest")."""
        if self.kind != "registry":
            return f"{'oci' if self.kind == 'layout' else 'oci-archive'}:{self.location}:{self.tag or 'latest'}"
        if not self.digest:
            return f"{self.location}:{self.tag or 'latest'}"
        return f"{self.location}{':' + self.tag if self.tag else ''}@{self.digest}"


@dataclass(frozen=True)
class ImageConfig:
    """What the image says about running it (its OCI config's ``config`` object)."""

    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = ""
    user: str = ""


@dataclass(frozen=True)
class Manifest:
    """One image of a layout: its manifest's digest, its config, and its layers (digest, media type, size)."""

    digest: str
    config: ImageConfig
    layers: tuple[tuple[str, str, int], ...]


def parse_ref(text: str) -> Ref:
    """The reference ``text`` names, without touching the file system or the network: the head's
    grammar (``domain/images.py``, which refuses a malformed one at submit), read as the cache
    names images. Raises ImageError."""
    try:
        read = image_refs.parse_ref(text)
    except image_refs.BadImageRef as exc:
        raise ImageError(str(exc)) from None
    if read.kind == "named":
        return Ref("registry", read.location, read.tag or "", read.digest or "")
    return Ref(read.kind, _absolute(read.location, text), read.tag or "")


def _absolute(path: str, text: str) -> str:
    if not path.startswith("/") or os.path.normpath(path) != path.rstrip("/") or "/../" in f"{path}/":
        raise ImageError(f"image path in {text!r} must be absolute and normalised")
    return path.rstrip("/") or "/"


@contextlib.contextmanager
def as_reader(reader: Account | None) -> Iterator[None]:
    """Open files as ``reader`` would: the supervisor is root, and a job must not get an image from
    a path its owner cannot read. The effective ids change around each ``open`` only (so the kernel
    checks the owner's rights on the open itself, with no race between a check and the open), and
    back: the supervisor is single-threaded here."""
    if reader is None or reader.uid == 0 or os.geteuid() != 0:
        yield
        return
    groups, egid = os.getgroups(), os.getegid()
    os.setgroups(list(reader.groups))
    os.setegid(reader.gid)
    os.seteuid(reader.uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(egid)
        os.setgroups(groups)


class Source:
    """The files of one layout: a directory, or an archive read in place (one tar scan, then seeks),
    each file opened as ``reader`` (the job's owner; None: as this process)."""

    def __init__(self, ref: Ref, reader: Account | None = None) -> None:
        self.ref, self.reader = ref, reader
        self._tar: tarfile.TarFile | None = None
        self._raw: IO[bytes] | None = None
        self._members: dict[str, tarfile.TarInfo] = {}
        if ref.kind == "archive":
            try:
                with as_reader(reader):
                    self._raw = open(ref.location, "rb")  # noqa: SIM115 (closed by close())
                self._tar = tarfile.open(fileobj=self._raw, mode="r:")  # noqa: SIM115 (closed by close())
                self._members = {m.name.removeprefix("./"): m for m in self._tar.getmembers() if m.isreg()}
            except (OSError, tarfile.TarError) as exc:
                self.close()
                if isinstance(exc, FileNotFoundError):
                    raise ImageUnavailable(f"the OCI archive {ref.location} is not on this node") from exc
                raise ImageError(f"cannot read the OCI archive {ref.location}: {_why(exc)}") from exc
        elif not os.path.lexists(ref.location):
            raise ImageUnavailable(f"the OCI layout {ref.location} is not on this node")
        elif not _isdir(ref.location, reader):
            raise ImageError(f"{ref.location} is not an OCI layout directory (or it is not readable)")

    def open(self, name: str) -> IO[bytes]:
        try:
            if self._tar is None:
                with as_reader(self.reader):
                    return open(os.path.join(self.ref.location, name), "rb")
            member = self._members.get(name)
            handle = self._tar.extractfile(member) if member is not None else None
            if handle is None:
                raise FileNotFoundError(name)
            return handle
        except PermissionError as exc:
            who = self.reader.name if self.reader is not None else "this node"
            raise ImageError(f"{self.ref.location}/{name} is not readable by {who}") from exc
        except OSError as exc:
            raise ImageError(f"{self.ref.location} is not an OCI image: it has no readable {name}") from exc

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()
        if self._raw is not None:
            self._raw.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _isdir(path: str, reader: Account | None) -> bool:
    with as_reader(reader):
        return os.path.isdir(path)


def read_manifest(source: Source, tag: str) -> Manifest:
    """The image tagged ``tag`` in the layout (``""``: its only image, else the one tagged "latest"),
    this machine's platform where the tag names an index. Every blob read is checked against its digest."""
    where = source.ref.location
    with source.open("index.json") as f:
        index = _json(f.read(), f"{where}/index.json")
    entries = [e for e in index.get("manifests") or () if isinstance(e, dict)]
    chosen = [e for e in entries if (e.get("annotations") or {}).get(REF_NAME) == (tag or "latest")]
    if not tag and not chosen and len(entries) == 1:
        chosen = entries
    if not chosen:
        what = f"no image tagged {tag!r}" if tag else f"{len(entries)} images and none tagged 'latest'"
        raise ImageError(f"{where} holds {what}")
    desc = chosen[0]
    manifest = _json(read_blob(source, desc), where)
    for _ in range(2):  # an index names one manifest per platform (its descriptor may not say it is one)
        if desc.get("mediaType") not in OCI_INDEX and "manifests" not in manifest:
            break
        desc = _platform(manifest, where)
        manifest = _json(read_blob(source, desc), where)
    if not isinstance(manifest.get("layers"), list):
        raise ImageError(f"not an OCI image: {where} names a manifest without layers")
    digest = _digest_of(desc)
    config = _json(read_blob(source, manifest.get("config") or {}), where).get("config") or {}
    layers = tuple(
        (_digest_of(d), str(d.get("mediaType", "")), int(d.get("size", 0))) for d in manifest.get("layers") or ()
    )
    return Manifest(digest, _config(config), layers)


def read_blob(source: Source, desc: dict[str, Any], limit: int = 16 << 20) -> bytes:
    """A small blob (manifest, index, config), checked against its digest."""
    digest = _digest_of(desc)
    with source.open(blob_path(digest)) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ImageError(f"blob {digest} is too large for a manifest or config")
    if _hash(digest, data) != digest:
        raise ImageError(f"blob {digest} of {source.ref.location} does not match its digest")
    return data


def blob_path(digest: str) -> str:
    algorithm, _, hexd = digest.partition(":")
    return f"blobs/{algorithm}/{hexd}"


def _digest_of(desc: Any) -> str:
    digest = desc.get("digest") if isinstance(desc, dict) else None
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ImageError(f"not an OCI image: a descriptor has no valid digest ({digest!r})")
    return digest


def _hash(digest: str, data: bytes) -> str:
    algorithm = digest.partition(":")[0]
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def _json(data: bytes, where: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise ImageError(f"not an OCI image: {where} holds malformed JSON") from exc
    if not isinstance(value, dict):
        raise ImageError(f"not an OCI image: {where} holds JSON that is not an object")
    return value


def _platform(index: dict[str, Any], where: str) -> dict[str, Any]:
    machine = os.uname().machine
    arch = _ARCH.get(machine, machine)
    for desc in index.get("manifests") or ():
        p = (desc.get("platform") if isinstance(desc, dict) else None) or {}
        if p.get("os", "linux") == "linux" and p.get("architecture", arch) == arch:
            return dict(desc)
    raise ImageError(f"{where} has no image for linux/{arch}")


def _config(config: dict[str, Any]) -> ImageConfig:
    def strings(key: str) -> tuple[str, ...]:
        value = config.get(key) or ()
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    return ImageConfig(
        strings("Env"),
        strings("Entrypoint"),
        strings("Cmd"),
        str(config.get("WorkingDir") or ""),
        str(config.get("User") or ""),
    )


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__

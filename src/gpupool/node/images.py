"""The node's image cache: each OCI image unpacked once, by digest, shared read-only by its jobs (issue 32).

A worker's supervisor asks ``ImageCache.get(ref)`` before it starts the worker; the pull or the
unpack happens there, in the supervisor (a separate process per worker), so a slow image never
blocks the head or another job. The cache directory (root's, 0711) holds one directory per manifest
digest (0700: only root reaches the shared root; a job sees it through its container's overlay)::

    DIR/.lock            the cache's own lock: meta.json updates, eviction
    DIR/<hex>/lock       SHARED by each job that uses the image (and by its unpacker), EXCLUSIVE to evict it
    DIR/<hex>/unpack.lock  EXCLUSIVE while the image is unpacked: the next caller waits, then finds it done
    DIR/<hex>/root       the unpacked root file system (0755), never written once it is named
    DIR/<hex>/meta.json  digest, names, size, last_used, config: its presence says the image is complete

An image is unpacked into ``DIR/<hex>/.root-tmp`` under ``unpack.lock``, renamed ``root`` when
whole, and only then gets its ``meta.json``: a crash leaves no half image, and the next ``get``
removes the leftover. Two locks, not one: a job holding the image SHARED for hours must not keep
another caller, waiting to unpack it EXCLUSIVE, from finding it already done.
Eviction (least recently used first) takes an image's lock EXCLUSIVE without waiting, so an image
a job holds (``hold``) is never removed from under it.

Names: a registry reference or a name given at import ("mystack" is "mystack:latest") is recorded
in its image's ``meta.json``; ``get`` uses the cached image of a name without asking the registry
again (as Kubernetes' ``IfNotPresent``), and a name imported again moves to the new digest.

Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpupool.node.accounts import Account
from gpupool.node.oci import (
    ImageConfig,
    ImageError,
    ImageUnavailable,
    Manifest,
    Ref,
    Source,
    blob_path,
    parse_ref,
    read_manifest,
)
from gpupool.node.pull import skopeo_copy
from gpupool.node.unpack import Budget, apply_layer

__all__ = ["CachedImage", "Image", "ImageCache", "ImageConfig", "ImageError", "ImageUnavailable", "Ref", "parse_ref"]

META, LOCK, UNPACK_LOCK, ROOT, TMP_ROOT = "meta.json", "lock", "unpack.lock", "root", ".root-tmp"
CACHE_LOCK = ".lock"


@dataclass(frozen=True)
class Image:
    """An unpacked image: ``root`` is read-only and shared by every job that runs it."""

    digest: str  # "sha256:<hex>", the manifest's
    root: str
    config: ImageConfig
    size: int  # bytes on disk


@dataclass(frozen=True)
class CachedImage:
    """One image the node holds (``gpupool images``)."""

    digest: str
    names: tuple[str, ...]
    size: int
    last_used: str  # ISO 8601, UTC
    busy: bool  # a job holds it, or it is being unpacked


def _quiet(_: str) -> None:
    pass


class ImageCache:
    """The images of one node, in ``directory``, bounded by ``limit_bytes`` (least recently used go first)."""

    def __init__(
        self,
        directory: str,
        limit_bytes: int,
        *,
        skopeo: str | None = shutil.which("skopeo"),
        authfile: str | None = None,
    ) -> None:
        self.directory, self.limit, self.skopeo, self.authfile = directory, limit_bytes, skopeo, authfile
        self._held: dict[str, int] = {}  # digest -> its lock's descriptor, SHARED, taken by get for hold
        os.makedirs(directory, mode=0o711, exist_ok=True)

    def get(
        self,
        ref: str,
        progress: Callable[[str], None] = _quiet,
        *,
        reader: Account | None = None,
        personal: str | None = None,
    ) -> Image:
        """The image ``ref`` names, pulled and unpacked if this node has not got it; a path read as
        ``reader`` (the job's owner: none of root's files through a job's reference). ``personal``:
        the gpupool user whose own registry login the pull uses. What it pulls is named theirs
        (``~user/name``), since another user may have no right to it: they find only what was
        pulled without a personal login, and pull the rest with their own. Raises ImageError."""
        parsed = parse_ref(ref)
        if parsed.kind != "registry":
            with Source(parsed, reader) as source:
                return self._install(source, parsed.tag, parsed.text, progress, keep=True)
        name = parsed.text if personal is None else f"~{personal}/{parsed.text}"  # no reference starts with ~
        found = self._named(parsed.text) or (self._named(name) if personal else None)
        if found is not None:
            return found
        key = hashlib.sha256(name.encode()).hexdigest()[:32]
        with self._flock(f".pull-{key}.lock"):  # one pull of a name at a time: the next finds it named
            return self._named(name) or self._pull(parsed, name, os.path.join(self.directory, f".pull-{key}"), progress)

    def hold(self, image: Image) -> int:
        """A descriptor holding ``image`` SHARED: it is not evicted until the descriptor is closed.
        ``get`` took it already (no eviction can slip in between); this hands it over, so call it
        once per ``get``, or ``close`` the cache to let go of what no one took."""
        fd = self._held.pop(image.digest, None)
        if fd is not None:
            return fd
        hexd = image.digest.partition(":")[2]
        fd = self._lock(hexd, fcntl.LOCK_SH)
        if self._meta(hexd) is None:
            os.close(fd)
            raise ImageError(f"image {image.digest} was evicted from this node's cache before it could be used")
        return fd

    def close(self) -> None:
        """Let go of the images ``get`` held and no ``hold`` took."""
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()

    def import_archive(self, path: str, name: str) -> Image:
        """Unpack the OCI archive (or layout directory) at ``path`` and name it ``name`` on this node."""
        ref = parse_ref(name)
        if ref.kind != "registry" or ref.digest:
            raise ImageError(f"image name {name!r} must be NAME or NAME:TAG")
        if not os.path.isabs(path):
            raise ImageError(f"image archive {path!r} must be an absolute path")
        source_ref = Ref("layout" if os.path.isdir(path) else "archive", os.path.normpath(path), "")
        with Source(source_ref) as source:
            return self._install(source, "", ref.text, _quiet, keep=False)

    def listing(self) -> list[CachedImage]:
        """The images held, most recently used first."""
        out = [
            CachedImage(str(m["digest"]), tuple(m["names"]), int(m["size"]), str(m["last_used"]), self._busy(hexd))
            for hexd, m in self._metas()
            if m is not None
        ]
        return sorted(out, key=lambda c: c.last_used, reverse=True)

    def evict(self, need_bytes: int = 0) -> list[str]:
        """Remove images, least recently used first and never a busy one, until those left and
        ``need_bytes`` more fit the bound; also what crashed unpacks left. The digests removed."""
        evicted: list[str] = []
        with self._flock(CACHE_LOCK):
            entries = list(self._metas())
            total = sum(int(m["size"]) for _, m in entries if m is not None)
            for hexd, meta in sorted(entries, key=lambda e: "" if e[1] is None else str(e[1]["last_used"])):
                if meta is not None and total + need_bytes <= self.limit:
                    break
                if self._remove(hexd) and meta is not None:
                    total -= int(meta["size"])
                    evicted.append(str(meta["digest"]))
        return evicted

    def _named(self, name: str) -> Image | None:
        """The cached image named ``name``, held SHARED and marked used; None if there is none."""
        for hexd, meta in self._metas():
            if meta is not None and name in meta["names"]:
                fd = self._lock(hexd, fcntl.LOCK_SH)
                if self._meta(hexd) is None:  # evicted between the look and the lock
                    os.close(fd)
                    return None
                return self._finish(hexd, fd, name, keep=True)
        return None

    def _pull(self, ref: Ref, name: str, tmp: str, progress: Callable[[str], None]) -> Image:
        if not self.skopeo:
            raise ImageUnavailable(f"cannot pull {ref.text}: skopeo is not installed on this node")
        shutil.rmtree(tmp, ignore_errors=True)  # a crashed pull's (we hold the pull's lock)
        progress(f"gpupool: pulling image {ref.text}")
        try:
            skopeo_copy(self.skopeo, self.authfile, ref, tmp, progress)
            with Source(Ref("layout", tmp, "latest")) as source:
                return self._install(source, "latest", name, progress, keep=True)
        except OSError as exc:
            raise ImageUnavailable(f"cannot pull {ref.text}: {exc.strerror or exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _install(self, source: Source, tag: str, name: str, progress: Callable[[str], None], keep: bool) -> Image:
        """The image of ``source``'s manifest, unpacked unless it is already; named ``name``."""
        manifest = read_manifest(source, tag)
        hexd = manifest.digest.partition(":")[2]
        fd = self._lock(hexd, fcntl.LOCK_SH)  # from here on it cannot be evicted
        try:
            if self._meta(hexd) is None:
                with self._flock(os.path.join(hexd, UNPACK_LOCK)):  # one unpacks; the others wait, then find it
                    if self._meta(hexd) is None:
                        self._build(hexd, source, manifest, progress)
        except BaseException:
            os.close(fd)
            raise
        return self._finish(hexd, fd, name, keep)

    def _finish(self, hexd: str, fd: int, name: str, keep: bool) -> Image:
        """Name the image and mark it used; its SHARED lock ``fd`` is kept for ``hold`` where ``keep``."""
        try:
            with self._flock(CACHE_LOCK):
                meta = self._touch(hexd, name)
            self.evict()  # back under the bound, now that this one is in (and held: it stays)
        except BaseException:
            os.close(fd)
            raise
        image = Image(str(meta["digest"]), os.path.join(self.directory, hexd, ROOT), _config(meta), int(meta["size"]))
        if keep:
            old = self._held.pop(image.digest, None)
            if old is not None:
                os.close(old)
            self._held[image.digest] = fd
        else:
            os.close(fd)
        return image

    def _build(self, hexd: str, source: Source, manifest: Manifest, progress: Callable[[str], None]) -> None:
        """Unpack the image beside its final place, rename it there when whole, then write its meta."""
        packed = sum(size for _, _, size in manifest.layers)
        if packed > self.limit:
            raise ImageError(f"the image ({packed >> 20} MiB packed) is larger than this node's image cache")
        self.evict(need_bytes=packed)  # room for at least its packed size before writing
        base = os.path.join(self.directory, hexd)
        tmp, root = os.path.join(base, TMP_ROOT), os.path.join(base, ROOT)
        for leftover in (tmp, root):  # a crashed unpack's (no meta.json: never named)
            shutil.rmtree(leftover, ignore_errors=True)
        os.mkdir(tmp, 0o755)
        budget = Budget(self.limit)
        try:
            for i, (digest, media_type, size) in enumerate(manifest.layers, 1):
                progress(f"gpupool: unpacking layer {i}/{len(manifest.layers)} ({size / 1e6:.1f} MB)")
                with source.open(blob_path(digest)) as blob:
                    apply_layer(tmp, blob, digest, media_type, budget)
            os.chmod(tmp, 0o755)
            size = _disk_usage(tmp)
            os.rename(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        config = dataclasses.asdict(manifest.config)
        meta = {"digest": manifest.digest, "names": [], "size": size, "last_used": _now(), "config": config}
        _write_json(os.path.join(base, META), meta)

    def _touch(self, hexd: str, name: str) -> dict[str, Any]:
        """Mark the image used now and give it ``name``, taken from any other image (cache lock held)."""
        for other, meta in self._metas():
            if other != hexd and meta is not None and name in meta["names"]:
                meta["names"] = [n for n in meta["names"] if n != name]
                _write_json(os.path.join(self.directory, other, META), meta)
        meta = self._meta(hexd) or {}
        if not meta:
            raise ImageError(f"image sha256:{hexd} vanished from this node's cache")
        meta["names"] = [*(n for n in meta["names"] if n != name), name]
        meta["last_used"] = _now()
        _write_json(os.path.join(self.directory, hexd, META), meta)
        return meta

    def _remove(self, hexd: str) -> bool:
        """Remove an image no one holds (renamed aside first, so a waiter on its old lock sees it gone)."""
        base = os.path.join(self.directory, hexd)
        try:
            fd = os.open(os.path.join(base, LOCK), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = None
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            gone = os.path.join(self.directory, f".gone-{hexd}-{os.getpid()}")
            os.rename(base, gone)
        except OSError:  # busy (BlockingIOError), or already gone
            return False
        finally:
            if fd is not None:
                os.close(fd)
        shutil.rmtree(gone, ignore_errors=True)
        return True

    def _busy(self, hexd: str) -> bool:
        try:
            fd = os.open(os.path.join(self.directory, hexd, LOCK), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def _lock(self, hexd: str, mode: int) -> int:
        """The image's lock file, locked ``mode``; retried if the image was evicted meanwhile."""
        base = os.path.join(self.directory, hexd)
        path = os.path.join(base, LOCK)
        while True:
            os.makedirs(base, mode=0o700, exist_ok=True)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except FileNotFoundError:
                continue  # renamed away between the two calls
            fcntl.flock(fd, mode)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
            os.close(fd)

    @contextlib.contextmanager
    def _flock(self, name: str) -> Iterator[None]:
        fd = os.open(os.path.join(self.directory, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _metas(self) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """Each image directory and its meta (None: not complete: being unpacked, or a crash's)."""
        for entry in sorted(os.listdir(self.directory)):
            if entry.startswith(".gone-"):
                shutil.rmtree(os.path.join(self.directory, entry), ignore_errors=True)
            elif len(entry) in (64, 128) and all(c in "0123456789abcdef" for c in entry):
                yield entry, self._meta(entry)

    def _meta(self, hexd: str) -> dict[str, Any] | None:
        try:
            with open(os.path.join(self.directory, hexd, META), encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None


def _config(meta: dict[str, Any]) -> ImageConfig:
    c = meta.get("config") or {}
    return ImageConfig(
        tuple(c.get("env") or ()),
        tuple(c.get("entrypoint") or ()),
        tuple(c.get("cmd") or ()),
        str(c.get("workdir") or ""),
        str(c.get("user") or ""),
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _disk_usage(root: str) -> int:
    """Bytes the tree takes on disk (its blocks; a hardlinked file once)."""
    seen: set[int] = set()
    total = os.lstat(root).st_blocks * 512
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(top, name))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total

"""Applying an OCI image's layers to a root file system, safely, as root (issue 32).

Unpacking runs as root into a directory every job of the image shares, from layers anyone may have
written, so a layer is applied member by member, never with ``tarfile.extractall``: each member's
parent is walked from the image's root one component at a time with ``O_NOFOLLOW``; a symlink met
on the way is resolved *inside* the root (as the container will see it, as containerd does: an
absolute target starts again at the image's root, ``..`` stops there); the last component is made
with ``*at`` calls relative to the parent's descriptor. So no member writes outside the root,
whatever links earlier members or layers made, and no path is ever handed to the kernel whole.

Refused (``ImageError``, the caller drops the half-made root): absolute or ``..`` member names,
relative symlinks whose target climbs above the root, hardlinks to an absolute or ``..`` name or to
nothing, device and FIFO nodes, more bytes than the cache may hold, a blob that does not match its
digest. Kept: owners and modes (images rely on them; a non-root caller cannot chown and keeps its
own), absolute symlinks (they name a file of the image once the container is entered). Dropped:
setuid and setgid bits, extended attributes (file capabilities among them). Whiteouts
(``.wh.NAME``, ``.wh..wh..opq``) remove what lower layers put there.

Standard library only: the supervisor runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tarfile
import zlib
from typing import IO

from gpupool.node.oci import OPAQUE, WHITEOUT, ImageError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_HOPS = 40  # symlinks followed resolving one path: the kernel's own bound
_CHUNK = 1 << 20
_MODE_BITS = 0o1777  # permission bits and sticky; never setuid (0o4000) or setgid (0o2000)


class Budget:
    """Bytes the image may still take (its layers' files together), shared by all its layers."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise ImageError(f"the image is larger than this node's image cache ({self.limit >> 20} MiB)")


class Hashing:
    """A reader that hashes what passes through it, so a layer is checked in the one pass that unpacks it."""

    def __init__(self, raw: IO[bytes], digest: str) -> None:
        self.raw, self.digest = raw, digest
        self.hash = hashlib.new(digest.partition(":")[0])

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.hash.update(data)
        return data

    def check(self) -> None:
        while self.read(_CHUNK):  # what the tar reader left (padding after the end marker)
            pass
        if f"{self.digest.partition(':')[0]}:{self.hash.hexdigest()}" != self.digest:
            raise ImageError(f"layer {self.digest} does not match its digest")


def apply_layer(root: str, blob: IO[bytes], digest: str, media_type: str, budget: Budget) -> None:
    """Apply one layer blob (checked against ``digest``) to the directory ``root``."""
    if "zstd" in media_type:
        raise ImageError(f"layer {digest} is zstd-compressed, which this node cannot read: push it with gzip")
    if media_type and "tar" not in media_type:
        raise ImageError(f"layer {digest} has media type {media_type!r}, which is not a layer")
    reader = Hashing(blob, digest)
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        # "r|*": gzip or not is read from the blob's first bytes, whatever its media type says
        with tarfile.open(fileobj=reader, mode="r|*") as tar:  # type: ignore[call-overload]
            _Layer(root_fd, tar, budget).apply()
        reader.check()
    except (tarfile.TarError, zlib.error, EOFError) as exc:
        raise ImageError(f"layer {digest} is not a valid tar archive ({exc})") from exc
    except OSError as exc:
        raise ImageError(f"cannot unpack layer {digest}: {exc.strerror or exc}") from exc
    finally:
        os.close(root_fd)


class _Layer:
    """One layer's members, in order; directories' modes, owners and times are set once it is all in."""

    def __init__(self, root_fd: int, tar: tarfile.TarFile, budget: Budget) -> None:
        self.root_fd, self.tar, self.budget = root_fd, tar, budget
        self.written: set[str] = set()  # member paths this layer made (an opaque whiteout keeps them)
        self.dirs: list[tuple[tuple[str, ...], tarfile.TarInfo]] = []
        self.parent: tuple[tuple[str, ...], int] | None = None  # the last parent walked, kept open

    def apply(self) -> None:
        try:
            for member in self.tar:
                self._member(member)
            self._forget()
            for parts, member in self.dirs:
                self._own_dir(parts, member)
        finally:
            self._forget()

    def _member(self, member: tarfile.TarInfo) -> None:
        parts = _parts(member.name)
        if not parts:
            return  # the root itself: it stays root's, 0755
        *above, name = parts
        if name == OPAQUE or name.startswith(WHITEOUT):
            self._whiteout(tuple(above), name)
            return
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            raise ImageError(f"layer member {member.name!r} is a device or FIFO node, which an image may not hold")
        self.budget.take(512)  # an inode, whatever it holds: a layer of a million empty files is large too
        pfd = self._parent(tuple(above))
        key = "/".join(parts)
        self.written.add(key)
        old = _lstat(pfd, name)
        if member.isdir():
            if old is not None and stat.S_ISDIR(old.st_mode):
                self.dirs.append((parts, member))
                return
            self._remove(pfd, name, old)
            os.mkdir(name, 0o700, dir_fd=pfd)
            self.dirs.append((parts, member))
        elif member.isreg():
            self._remove(pfd, name, old)
            self.budget.take(member.size + 4096)
            self._file(pfd, name, member)
        elif member.issym():
            _check_link(above, member)
            self._remove(pfd, name, old)
            os.symlink(member.linkname, name, dir_fd=pfd)
            _own(None, (pfd, name), member)
        else:
            self._hardlink(pfd, name, old, member)

    def _own_dir(self, parts: tuple[str, ...], member: tarfile.TarInfo) -> None:
        """A directory's mode, owner and time, unless a later member of the layer removed it or
        put something else (a link, which is not followed) in its place."""
        try:
            pfd = self._walk(parts[:-1], create=False)
        except (FileNotFoundError, ImageError):
            return
        try:
            fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=pfd)
        except OSError:
            return
        finally:
            os.close(pfd)
        try:
            _own(fd, None, member)
        finally:
            os.close(fd)

    def _file(self, pfd: int, name: str, member: tarfile.TarInfo) -> None:
        fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=pfd)
        try:
            src = self.tar.extractfile(member)
            if src is not None:
                with open(fd, "wb", closefd=False) as out:
                    shutil.copyfileobj(src, out, _CHUNK)
            _own(fd, None, member)
        finally:
            os.close(fd)

    def _hardlink(self, pfd: int, name: str, old: os.stat_result | None, member: tarfile.TarInfo) -> None:
        target = _parts(member.linkname)
        if not target:
            raise ImageError(f"hardlink {member.name!r} has no target")
        spfd = self._walk(tuple(target[:-1]), create=False)
        try:
            src = _lstat(spfd, target[-1])
            if src is None or stat.S_ISDIR(src.st_mode):
                raise ImageError(f"hardlink {member.name!r} points to {member.linkname!r}, which is not in the image")
            self._remove(pfd, name, old)
            os.link(target[-1], name, src_dir_fd=spfd, dst_dir_fd=pfd, follow_symlinks=False)
        finally:
            os.close(spfd)

    def _whiteout(self, above: tuple[str, ...], name: str) -> None:
        hidden = name[len(WHITEOUT) :]
        if name != OPAQUE and hidden in ("", ".", ".."):  # ".wh..." would remove the directory above
            raise ImageError(f"layer whiteout {'/'.join((*above, name))!r} names no file")
        try:
            pfd = self._parent(above, create=False)
        except FileNotFoundError:
            return  # nothing below to hide
        if name == OPAQUE:
            _clear(pfd, "/".join(above), self.written)
        else:
            self._remove(pfd, hidden, _lstat(pfd, hidden))

    def _remove(self, pfd: int, name: str, old: os.stat_result | None) -> None:
        # Only children of the kept parent are ever removed or replaced: the parent itself, and so
        # the descriptor kept for it, stays what its path resolves to.
        if old is None:
            return
        if stat.S_ISDIR(old.st_mode):
            shutil.rmtree(name, dir_fd=pfd)
        else:
            os.unlink(name, dir_fd=pfd)

    def _parent(self, parts: tuple[str, ...], create: bool = True) -> int:
        if self.parent is not None and self.parent[0] == parts:
            return self.parent[1]
        fd = self._walk(parts, create)
        self._forget()
        self.parent = (parts, fd)
        return fd

    def _forget(self) -> None:
        if self.parent is not None:
            os.close(self.parent[1])
            self.parent = None

    def _walk(self, parts: tuple[str, ...], create: bool) -> int:
        """An open descriptor of the directory ``parts`` names, resolved inside the root: each step
        opened with O_NOFOLLOW, a symlink's target walked from its directory (or from the root)."""
        chain = [os.dup(self.root_fd)]
        todo, hops = list(parts), 0
        try:
            while todo:
                part = todo.pop(0)
                if part == "..":
                    if len(chain) > 1:
                        os.close(chain.pop())
                elif part not in ("", "."):
                    target = _step(chain, part, create)
                    if target is None:
                        continue
                    hops += 1
                    if hops > _MAX_HOPS:
                        raise ImageError(f"too many symlinks resolving {'/'.join(parts)!r} in the image")
                    if target.startswith("/"):
                        while len(chain) > 1:
                            os.close(chain.pop())
                    todo[:0] = target.split("/")
            return chain.pop()
        finally:
            for fd in chain:
                os.close(fd)


def _step(chain: list[int], part: str, create: bool) -> str | None:
    """One step of a walk: the directory ``part`` opened onto ``chain`` (made if missing and
    ``create``), or, where ``part`` is a symlink, its target (to be walked instead)."""
    try:
        chain.append(os.open(part, _DIR_FLAGS, dir_fd=chain[-1]))
        return None
    except FileNotFoundError:
        if not create:
            raise
        os.mkdir(part, 0o755, dir_fd=chain[-1])
        chain.append(os.open(part, _DIR_FLAGS, dir_fd=chain[-1]))
        return None
    except OSError:
        st = os.stat(part, dir_fd=chain[-1], follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        raise ImageError(f"a layer puts files under {part!r}, which is not a directory")
    return os.readlink(part, dir_fd=chain[-1])


def _parts(name: str) -> tuple[str, ...]:
    """A member name's components; refuses what would leave the root before any link is involved."""
    if name.startswith("/") or "\0" in name:
        raise ImageError(f"layer member {name!r} has an absolute name")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise ImageError(f"layer member {name!r} climbs out of the image's root with '..'")
    return parts


def _check_link(above: list[str], member: tarfile.TarInfo) -> None:
    if "\0" in member.linkname or not member.linkname:
        raise ImageError(f"symlink {member.name!r} has an empty or malformed target")
    if member.linkname.startswith("/"):
        return  # resolved inside the image once entered, and while unpacking by _walk
    depth = len(above)
    for part in member.linkname.split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            raise ImageError(f"symlink {member.name!r} points outside the image ({member.linkname!r})")


def _own(fd: int | None, at: tuple[int, str] | None, member: tarfile.TarInfo) -> None:
    """The member's owner (root only can give it), permission bits less setuid/setgid, and mtime."""
    if os.geteuid() == 0:
        if fd is not None:
            os.fchown(fd, member.uid, member.gid)
        elif at is not None:
            os.chown(at[1], member.uid, member.gid, dir_fd=at[0], follow_symlinks=False)
    if fd is not None:
        os.fchmod(fd, member.mode & _MODE_BITS)
        with contextlib.suppress(OverflowError, ValueError):
            os.utime(fd, (member.mtime, member.mtime))
    elif at is not None:
        with contextlib.suppress(OverflowError, ValueError, NotImplementedError):
            os.utime(at[1], (member.mtime, member.mtime), dir_fd=at[0], follow_symlinks=False)


def _lstat(pfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _clear(dfd: int, path: str, keep: set[str]) -> None:
    """An opaque whiteout: remove what lower layers put in the directory (and in the directories
    this layer made or filled inside it), keeping what this layer made."""
    for name in os.listdir(dfd):
        key = f"{path}/{name}" if path else name
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode) and (key in keep or any(k.startswith(key + "/") for k in keep)):
            sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            try:
                _clear(sub, key, keep)
            finally:
                os.close(sub)
        elif stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=dfd)
        elif key not in keep:
            os.unlink(name, dir_fd=dfd)

"""A node's image cache as the head sees it (issue 32): what it holds (``gpupool images``), an
admin's import (``gpupool image import``), and whether and how the node runs images at all (the
``images`` line of ``gpupool nodes``).

The cache itself is ``node/images.py``, which the supervisors use while jobs start; this module
is the runtime's side of it, kept apart so the runtime stays small. The executors call it through
``NodeRuntime.image_cache``, on the node that holds the cache.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gpupool.domain.errors import InvalidInput
from gpupool.domain.images import NodeImage
from gpupool.domain.resources import format_bytes
from gpupool.node.images import ImageCache, ImageError
from gpupool.node.walls import NodeWalls


class CachedImages:
    def __init__(self, node: str, directory: Path, limit_bytes: int, walls: NodeWalls) -> None:
        self.node, self.directory, self.limit = node, directory, limit_bytes
        # Found once, as the walls are: a node does not gain root or overlayfs while it runs.
        self.why_not = _why_not(walls.as_owners, walls.scratch_why)
        self.skopeo = shutil.which("skopeo")

    def listing(self) -> list[NodeImage]:
        """The images the node holds, most recently used first; none before its first image (the
        cache directory is not made just to be listed)."""
        if not self.directory.is_dir():
            return []
        return [NodeImage(self.node, c.digest, c.names, c.size, c.last_used, c.busy) for c in self._cache().listing()]

    def import_archive(self, path: str, name: str) -> NodeImage:
        """Unpack the OCI archive (or layout directory) at ``path``, on a file system this node
        sees, into its cache as ``name``. InvalidInput with the node's sentence where it is no
        usable image (not there, not OCI, a layer escaping its root, larger than the cache)."""
        try:
            image = self._cache().import_archive(path, name)
        except ImageError as exc:
            raise InvalidInput(str(exc), code="bad_image") from None
        except OSError as exc:  # the cache itself (a full disk): not the archive's fault, but said alike
            raise InvalidInput(f"cannot import {path}: {exc.strerror or exc}", code="bad_image") from None
        held = next((i for i in self.listing() if i.digest == image.digest), None)
        return held or NodeImage(self.node, image.digest, (name,), image.size, "", False)

    def isolation(self) -> dict[str, str]:
        """The node's ``images`` line: how a job with ``--image`` runs here, or why it cannot.
        Fixed for the node's life, as its walls are (the head records a node's description when
        it joins or changes): what the cache holds now is ``gpupool images``'s to say."""
        if self.why_not is not None:
            return {"images": f"none ({self.why_not}: a job with --image fails here)"}
        pulls = (
            "registry pulls with skopeo"
            if self.skopeo
            else "no registry pulls (skopeo is not installed): OCI archives, layouts and imported names"
        )
        return {"images": f"OCI, overlay root, cache {format_bytes(self.limit)} (gpupool images lists it); {pulls}"}

    def _cache(self) -> ImageCache:
        return ImageCache(str(self.directory), self.limit, skopeo=self.skopeo)


def _why_not(as_root: bool, scratch_why: str | None) -> str | None:
    """None where this node can build a job's root from an image (root, a mount namespace, an
    overlay file system); else why not, in a few words."""
    if not as_root:
        return "not root: only root can mount an image's root"
    if scratch_why is not None:
        return f"no mount namespace: {scratch_why}"
    if not overlay_usable():
        return "no overlayfs in this kernel"
    return None


def overlay_usable(filesystems: str = "/proc/filesystems", modules: str = "/lib/modules") -> bool:
    """Whether the kernel has overlayfs, or a module the first mount loads."""
    try:
        with open(filesystems, encoding="utf-8") as f:
            if any(line.split()[-1:] == ["overlay"] for line in f):
                return True
    except OSError:
        pass
    return os.path.isdir(os.path.join(modules, os.uname().release, "kernel", "fs", "overlayfs"))

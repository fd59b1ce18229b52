"""What a worker's spec says of its image (issue 32): a small module of its own, so the run
directory protocol (``rundir.py``) reads it without loading the image cache, which only a worker
with an image needs (``image_start.py``, imported by the supervisor then).

Standard library only: the supervisor reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from gpupool.domain.launch import ImagePhase

PHASE = "image.json"  # in the worker's run dir: where its supervisor is with the image (ImagePhase)


class ImageJob(NamedTuple):
    ref: str  # as the job asked (domain/images.py's forms)
    cache_dir: str  # the node's image cache
    cache_bytes: int  # its bound (gpupool up --image-cache)
    node_keys: tuple[str, ...] = ()  # variables that are only the node's defaults: the image's own win
    authfile: str | None = None  # the node's registry credentials (skopeo's --authfile), root's alone
    # The owner's own login to the image's registry: {"owner", "registry", "auths"} where "auths"
    # is a containers-auth.json "auths" entry. In the spec (root's, 0600) for the pull alone.
    login: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "node_keys": list(self.node_keys)}

    def __repr__(self) -> str:  # never the login's secret in a log line
        return f"ImageJob(ref={self.ref!r}, login={'yes' if self.login else 'no'})"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageJob:
        return cls(
            ref=str(data["ref"]),
            cache_dir=str(data["cache_dir"]),
            cache_bytes=int(data["cache_bytes"]),
            node_keys=tuple(str(k) for k in data.get("node_keys") or ()),
            authfile=data.get("authfile") or None,
            login=data.get("login") or None,
        )


def write_phase(run: Path, line: str, digest: str | None = None) -> None:
    """Say where the supervisor is with the image; replaced whole, so a reader never sees half."""
    tmp = run / f".{PHASE}.tmp"
    tmp.write_text(json.dumps({"line": line, "digest": digest}))
    os.replace(tmp, run / PHASE)


def read_phase(run: Path) -> ImagePhase | None:
    """None for a worker without an image, or before its supervisor said anything."""
    try:
        data = json.loads((run / PHASE).read_text())
        return ImagePhase(str(data["line"]), data.get("digest") or None)
    except (OSError, ValueError, TypeError, KeyError):
        return None

"""What a worker's spec says of its image (issue 32): a small module of its own, so the run
directory protocol (``rundir.py``) reads it without loading the image cache, which only a worker
with an image needs (``image_start.py``, imported by the supervisor then).

Standard library only: the supervisor reads it.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class ImageJob(NamedTuple):
    ref: str  # as the job asked (domain/images.py's forms)
    cache_dir: str  # the node's image cache
    cache_bytes: int  # its bound (gpupool up --image-cache)
    node_keys: tuple[str, ...] = ()  # variables that are only the node's defaults: the image's own win
    authfile: str | None = None  # the node's registry credentials (skopeo's --authfile), root's alone

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "node_keys": list(self.node_keys)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageJob:
        return cls(
            ref=str(data["ref"]),
            cache_dir=str(data["cache_dir"]),
            cache_bytes=int(data["cache_bytes"]),
            node_keys=tuple(str(k) for k in data.get("node_keys") or ()),
            authfile=data.get("authfile") or None,
        )

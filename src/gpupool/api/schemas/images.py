"""Image request and response models (``gpupool images``, ``gpupool image import``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.images import NodeImage
from gpupool.usecases.images import MAX_NAME, MAX_PATH, Listing, NodeImport


class ImageOut(BaseModel):
    node: str
    digest: str = Field(description="sha256:<hex>, the image's manifest digest")
    names: list[str] = Field(description="what jobs name it by (--image NAME), as imported or pulled")
    size: int = Field(description="bytes it takes on the node's disk, unpacked")
    last_used: str = Field(description="ISO 8601, UTC: when a job last started in it (or it was imported)")
    busy: bool = Field(description="a job runs in it, or it is being unpacked: it is not evicted")

    @classmethod
    def of(cls, i: NodeImage) -> ImageOut:
        return cls(node=i.node, digest=i.digest, names=list(i.names), size=i.size, last_used=i.last_used, busy=i.busy)


class SkippedNode(BaseModel):
    node: str
    reason: str = Field(description="why it was not asked, or what it answered")


class ImagesOut(BaseModel):
    images: list[ImageOut]
    skipped: list[SkippedNode] = Field(description="nodes whose images are not listed (down, not answering)")

    @classmethod
    def of(cls, listing: Listing) -> ImagesOut:
        return cls(
            images=[ImageOut.of(i) for i in listing.images],
            skipped=[SkippedNode(node=s.node, reason=s.reason) for s in listing.skipped],
        )


class ImportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        min_length=1,
        max_length=MAX_PATH,
        description="absolute path of an OCI archive (a .tar, as skopeo or buildah write) or an OCI layout"
        " directory, on a file system every node sees",
    )
    name: str = Field(
        min_length=1, max_length=MAX_NAME, description="NAME or NAME:TAG: what jobs give as --image (mystack:v2)"
    )


class NodeImportOut(BaseModel):
    node: str
    result: Literal["imported", "failed", "skipped"]
    image: ImageOut | None = Field(None, description="the image it holds now (imported)")
    message: str | None = Field(None, description="why it failed or was skipped, in the node's words")

    @classmethod
    def of(cls, done: NodeImport) -> NodeImportOut:
        if done.image is not None:
            return cls(node=done.node, result="imported", image=ImageOut.of(done.image))
        if done.skipped is not None:
            return cls(node=done.node, result="skipped", message=done.skipped)
        return cls(node=done.node, result="failed", message=done.error)


class ImportOut(BaseModel):
    path: str
    name: str
    nodes: list[NodeImportOut]

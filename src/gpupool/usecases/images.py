"""Image use cases (issue 32): what each node's image cache holds, and an admin's import of an OCI
archive onto every node.

Each node keeps its own cache (``node/images.py``), so both ask every node that is not down, all
at once (a silent node costs one timeout, not one per node), and say which nodes they skipped and
why: a listing is never silently short, and an import says per node what happened. The archive is
read by each node itself, from a file system they share (NFS, Lustre...): the head never carries
the image.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from gpupool.domain.errors import GpupoolError, InvalidInput, Unavailable
from gpupool.domain.images import BadImageRef, NodeImage, parse_ref
from gpupool.domain.nodes import NodeState
from gpupool.store.tokens import Principal
from gpupool.usecases import nodes as node_service
from gpupool.usecases.access import require_admin
from gpupool.usecases.context import HeadContext

MAX_PATH = 4096  # PATH_MAX
MAX_NAME = 255
_ASKED_AT_ONCE = 16
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Skipped:
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Listing:
    images: list[NodeImage]  # node by node, each node's most recently used first
    skipped: list[Skipped]  # nodes not asked (down) or that did not answer


@dataclass(frozen=True, slots=True)
class NodeImport:
    """What one node did with an import: ``image`` where it holds it now, else ``error`` (its
    sentence) or ``skipped`` (why it was not asked)."""

    node: str
    image: NodeImage | None = None
    error: str | None = None
    skipped: str | None = None


def listing(ctx: HeadContext) -> Listing:
    """Every image every node that is not down holds."""
    up, skipped = _nodes(ctx)
    answers = _each(up, ctx.executor.images)
    images: list[NodeImage] = []
    for node, answer in zip(up, answers, strict=True):
        if isinstance(answer, GpupoolError):
            skipped.append(Skipped(node, answer.message))
        else:
            images.extend(answer)
    return Listing(images, skipped)


def import_image(ctx: HeadContext, who: Principal, path: str, name: str) -> list[NodeImport]:
    """Import the OCI archive (or layout directory) at ``path`` as ``name`` on every node that is
    not down (admins only). Raises InvalidInput with the node's sentence where no node could use
    it (not an OCI image...), Unavailable where no node could be asked."""
    require_admin(who, "import images")
    path, name = check_path(path), check_name(name)
    up, skipped = _nodes(ctx)
    if not up:
        raise Unavailable("no node is up to import the image on: start or join one, then import again", "no_nodes")
    answers = _each(up, lambda node: ctx.executor.import_image(node, path, name))
    done = [
        NodeImport(node, error=a.message) if isinstance(a, GpupoolError) else NodeImport(node, image=a)
        for node, a in zip(up, answers, strict=True)
    ]
    refused = [a for a in answers if isinstance(a, InvalidInput)]
    if refused and not any(d.image for d in done):
        raise InvalidInput(refused[0].message, code=refused[0].code)
    if not any(d.image for d in done):
        raise Unavailable(f"no node could import the image: {done[0].error}", code="node_unreachable")
    return done + [NodeImport(s.node, skipped=s.reason) for s in skipped]


def check_path(path: str) -> str:
    """An absolute path on the nodes, normalised; InvalidInput otherwise."""
    if not path.startswith("/"):
        raise InvalidInput(
            f"the image archive must be an absolute path on the nodes' shared file system, got {path[:80]!r}",
            code="invalid_path",
        )
    if len(path) > MAX_PATH or any(not ch.isprintable() for ch in path):
        raise InvalidInput(
            f"the image archive path must be at most {MAX_PATH} printable characters", code="invalid_path"
        )
    return posixpath.normpath(path)


def check_name(name: str) -> str:
    """A name jobs give as ``--image NAME``: NAME or NAME:TAG, as a registry image is named."""
    why = f"image name {name[:80]!r} must be NAME or NAME:TAG: lower-case letters, digits, '.', '_', '-', '/'"
    if not name or len(name) > MAX_NAME:
        raise InvalidInput(f"{why}, at most {MAX_NAME} characters", code="invalid_image_name")
    try:
        ref = parse_ref(name)
    except BadImageRef:
        raise InvalidInput(why, code="invalid_image_name") from None
    if ref.kind != "named" or ref.digest:
        raise InvalidInput(f"{why} (no path, no @digest)", code="invalid_image_name")
    return name


def _nodes(ctx: HeadContext) -> tuple[list[str], list[Skipped]]:
    """The nodes to ask, and those not asked (down), each with why."""
    up: list[str] = []
    skipped: list[Skipped] = []
    for record in node_service.listing(ctx):
        node = record.node
        if node.state is NodeState.DOWN:
            skipped.append(Skipped(node.name, "down: asked again once it is back"))
        else:
            up.append(node.name)
    return up, skipped


def _each(nodes: list[str], ask: Callable[[str], T]) -> list[T | GpupoolError]:
    """``ask`` of every node at once; a node's GpupoolError is its answer, not the call's."""

    def one(node: str) -> T | GpupoolError:
        try:
            return ask(node)
        except GpupoolError as exc:
            return exc

    if len(nodes) <= 1:
        return [one(n) for n in nodes]
    with ThreadPoolExecutor(max_workers=min(len(nodes), _ASKED_AT_ONCE), thread_name_prefix="gpupool-images") as pool:
        return list(pool.map(one, nodes))

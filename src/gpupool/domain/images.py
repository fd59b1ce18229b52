"""Image references (issue 32): what ``--image`` may name, checked at submit.

A job's image is one of
- an OCI image layout directory or an OCI archive (a tar of a layout) on a file system the nodes
  share: an absolute path, or ``oci:/path[:tag]`` / ``oci-archive:/path[:tag]``;
- a name an admin imported on the nodes (``gpupool image import FILE --name NAME``): ``mystack`` or
  ``mystack:v2``;
- an image in a registry (``nvcr.io/nvidia/pytorch:24.10-py3``, ``python:3.11@sha256:...``),
  pulled on the node.

A bare name is looked up among the imported names first, then in a registry: both are written
alike. The head checks only the form here (pure, no I/O); whether a node can get the image is the
node's to find out (``node/images.py``), and a job whose image it cannot get ends with exit reason
``image`` and the reason in its events.

Standard library only: the node's supervisor reads references with this module too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, NamedTuple

MAX_REF = 512
# The distribution spec's grammar (docker/distribution reference): lower-case path components
# separated by "/", an optional registry host (with a port) first, a tag and/or a digest last.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]{{1,5}})?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"sha256:[a-f0-9]{64}"
_NAMED = re.compile(
    rf"^(?:(?P<host>{_HOST})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
_TAG_ONLY = re.compile(rf"^{_TAG}$")
Kind = Literal["layout", "archive", "named"]


class ImageRef(NamedTuple):
    """A reference, read. ``kind``: an OCI layout dir, an OCI archive, or a name (imported on the
    nodes, else pulled from a registry). ``location``: the path, or the name without tag and
    digest. ``tag``: the tag asked for, if any (a layout's ``org.opencontainers.image.ref.name``)."""

    kind: Kind
    location: str
    tag: str | None = None
    digest: str | None = None

    @property
    def is_registry_like(self) -> bool:
        """A name with a registry host (``nvcr.io/...``): never an imported name."""
        return self.kind == "named" and "/" in self.location and _looks_like_host(self.location.split("/", 1)[0])


class BadImageRef(ValueError):
    """The text is not an image reference; the message says what is wrong in one sentence."""


def parse_ref(text: str) -> ImageRef:
    """Read an image reference, or raise ``BadImageRef``."""
    if not isinstance(text, str) or not text:
        raise BadImageRef("an image reference must not be empty")
    if len(text) > MAX_REF:
        raise BadImageRef(f"an image reference is at most {MAX_REF} characters, got {len(text)}")
    if any(not ch.isprintable() or ch.isspace() for ch in text):
        raise BadImageRef(f"image reference {text[:80]!r} has a space or a control character")
    prefixes: tuple[tuple[str, Kind], ...] = (("oci-archive:", "archive"), ("oci:", "layout"))
    for prefix, kind in prefixes:
        if text.startswith(prefix):
            return _path_ref(text[len(prefix) :], kind)
    if text.startswith("/"):
        return _path_ref(text, "archive" if text.endswith(".tar") else "layout", tagged=False)
    found = _NAMED.match(text)
    if found is None:
        raise BadImageRef(
            f"{text[:80]!r} is not an image reference: give a registry image (python:3.11,"
            " nvcr.io/nvidia/pytorch:24.10-py3), a name an admin imported, or an absolute path to an"
            " OCI layout or archive (oci:/path, oci-archive:/path.tar)"
        )
    location = f"{found['host']}/{found['path']}" if found["host"] else found["path"]
    return ImageRef("named", location, found["tag"], found["digest"])


def _path_ref(rest: str, kind: Kind, tagged: bool = True) -> ImageRef:
    path, tag = rest, None
    if tagged and ":" in rest.rsplit("/", 1)[-1]:  # a colon in a directory's name is not a tag
        path, tag = rest.rsplit(":", 1)
        if not _TAG_ONLY.match(tag):
            raise BadImageRef(f"invalid tag {tag[:80]!r} in image reference: letters, digits, '_', '.', '-'")
    if not path.startswith("/"):
        raise BadImageRef(f"an OCI {kind} must be an absolute path on the nodes, got {path[:80]!r}")
    if "\x00" in path or any(part == ".." for part in path.split("/")):
        raise BadImageRef(f"an OCI {kind} path must not contain '..': {path[:80]!r}")
    return ImageRef(kind, path, tag)


def _looks_like_host(first: str) -> bool:
    """Docker's rule: a first component with a dot or a port, or ``localhost``, is a registry."""
    return "." in first or ":" in first or first == "localhost" or first.startswith("[")


@dataclass(frozen=True, slots=True)
class NodeImage:
    """One image a node holds in its cache, as ``gpupool images`` lists it: the executors carry it
    from each node's cache (``node/images.py``) to the head in these words."""

    node: str
    digest: str  # "sha256:<hex>", its manifest's
    names: tuple[str, ...]  # the names it was imported or pulled as ("mystack:latest", "python:3.11")
    size: int  # bytes on the node's disk, unpacked
    last_used: str  # ISO 8601, UTC
    busy: bool  # a job runs in it (or it is being unpacked): it is not evicted

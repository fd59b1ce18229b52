"""A user's own registry logins (issue 32): ``gpupool login --registry HOST``.

A private image (a lab's own, or NGC's) is pulled on the node that runs the job, with the job
owner's credentials for the image's registry where they gave some, else with the node's own file
(``registry-auth.json``), else anonymously. The head keeps each login sealed
(``store/sealing.py``), shows only the registry and user name back, and puts the secret into the
launch of that owner's jobs only, for the node's pull; the job itself never sees it.

Pure: what a launch carries of a login to the node is ``domain/launch.RegistryAuth``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from gpupool.domain.errors import InvalidInput
from gpupool.domain.images import BadImageRef, parse_ref

DOCKER_HUB = "docker.io"  # where a name without a registry host is pulled from (docker's rule)
# Docker Hub's other spellings: one login serves all of them, as in docker's own config.json.
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
MAX_USERNAME = 256
MAX_SECRET = 16384  # registry tokens can be long JWTs (a few KB); a password this long is not one
_HOST = re.compile(
    r"^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:]+\])(?::[0-9]{1,5})?$"
)


def registry_host(text: str) -> str:
    """The registry ``text`` names (``nvcr.io``, ``registry.lab:5000``), lower case, Docker Hub's
    spellings as ``docker.io``; InvalidInput (one sentence) for anything else."""
    host = text.strip().lower() if isinstance(text, str) else ""
    if "://" in host:
        raise InvalidInput(f"give the registry as a host name, without a scheme: {host.split('://', 1)[1]!r}")
    host = host.rstrip("/")
    if not host or len(host) > 253 or not _HOST.match(host):
        raise InvalidInput(f"{text[:80]!r} is not a registry host: give one like nvcr.io or registry.lab:5000")
    return DOCKER_HUB if host in _HUB_ALIASES else host


def registry_of(image: str | None) -> str | None:
    """The registry a node pulls ``image`` from, if it ever does: None for an OCI path. A name
    without a host is Docker Hub's (a name an admin imported is used before any pull, with no login)."""
    if not image:
        return None
    try:
        ref = parse_ref(image)
    except BadImageRef:
        return None
    if ref.kind != "named":
        return None
    return registry_host(ref.location.split("/", 1)[0]) if ref.is_registry_like else DOCKER_HUB


def check_login(username: str, secret: str) -> None:
    """A registry user name and secret in bounds: InvalidInput otherwise."""
    if not username or len(username) > MAX_USERNAME or any(not ch.isprintable() or ch == ":" for ch in username):
        raise InvalidInput(
            f"a registry user name is 1 to {MAX_USERNAME} printable characters without ':' (NGC's is $oauthtoken)"
        )
    if not secret or len(secret) > MAX_SECRET or any(ch in "\r\n\x00" for ch in secret):
        raise InvalidInput(f"a registry password or token is 1 to {MAX_SECRET} characters on one line")


@dataclass(frozen=True, slots=True)
class RegistryLogin:
    """What the head shows of a login: never its secret."""

    registry: str
    username: str
    saved_at: datetime

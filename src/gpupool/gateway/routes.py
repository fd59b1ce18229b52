"""The route table: which URL prefix goes to which replicas, under which limits, and where it comes
from (the head, polled; or a JSON file, for tests and benchmarks).

The head's answer to ``GET /api/v1/gateway/routes`` and the file share one shape, so both are read
by ``parse_table``; anything malformed is refused with one line naming the field, and a gateway
polling the head keeps its last good table rather than serving a broken one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from gpupool.domain.services import RESERVED_NAMES

KINDS = ("service", "job")
MAX_NAME = 200


class RouteTableError(ValueError):
    """A route table that cannot be used, with a one-line reason."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    replica: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Route:
    """``name`` is the first segment of the URL (``jobs/<id>`` for a job's published port)."""

    name: str
    kind: str
    project: str
    public: bool
    max_concurrency: int
    queue_limit: int
    timeout_s: float
    endpoints: tuple[Endpoint, ...]
    # A service that may run no replica: a request finding none waits (its timeout) while the
    # head's autoscaler, told of it by the load report, starts one; else it gets 503 at once.
    scale_to_zero: bool = False

    @property
    def prefix(self) -> str:
        return f"/{self.name}"

    @property
    def job_id(self) -> int | None:
        return int(self.name.split("/", 1)[1]) if self.kind == "job" else None


class RouteSource(Protocol):
    """Where the table comes from; ``fetch`` raises on failure (the caller keeps the last table)."""

    async def fetch(self) -> dict[str, Route]: ...


def parse_table(doc: object) -> dict[str, Route]:
    """``{"routes": [...]}`` -> routes by name, or ``RouteTableError``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("routes"), list):
        raise RouteTableError('route table: expected an object {"routes": [...]}')
    routes: dict[str, Route] = {}
    for i, item in enumerate(doc["routes"]):
        route = _route(item, f"routes[{i}]")
        if route.name in routes:
            raise RouteTableError(f"route table: routes[{i}]: name {route.name!r} appears twice")
        routes[route.name] = route
    return routes


def route_name(path: str) -> str:
    """The route a request path names: its first segment, or two for ``/jobs/<id>/...``."""
    parts = path.split("/", 3)  # "", first, second, rest
    if len(parts) < 2:
        return ""
    if parts[1] == "jobs" and len(parts) > 2:
        return f"jobs/{parts[2]}"
    return parts[1]


class FileRoutes:
    """A static table from a JSON file, read again whenever the file changes (a test or benchmark
    rewrites it to add or remove replicas)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seen: tuple[float, int] | None = None
        self._table: dict[str, Route] = {}

    async def fetch(self) -> dict[str, Route]:
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime, stat.st_size)
            if stamp != self._seen:
                self._table = parse_table(json.loads(self._path.read_text()))
                self._seen = stamp
        except (OSError, json.JSONDecodeError) as e:
            raise RouteTableError(f"route table {self._path}: {e}") from None
        return self._table


class HeadRoutes:
    """The head's table, asked for with the admin token."""

    PATH = "/api/v1/gateway/routes"

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def fetch(self) -> dict[str, Route]:
        try:
            response = await self._client.get(self.PATH)
        except httpx.HTTPError as e:
            raise RouteTableError(f"route table: head unreachable: {e!r}") from None
        if response.status_code != 200:
            raise RouteTableError(f"route table: head answered {response.status_code}: {response.text[:200]}")
        try:
            return parse_table(response.json())
        except json.JSONDecodeError:
            raise RouteTableError("route table: the head's answer is not JSON") from None


def _route(item: object, where: str) -> Route:
    if not isinstance(item, dict):
        raise RouteTableError(f"route table: {where}: expected an object")
    name = _text(item, "name", where)
    kind = _text(item, "kind", where)
    if kind not in KINDS:
        raise RouteTableError(f"route table: {where}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    _check_name(name, kind, where)
    endpoints = item.get("endpoints")
    if not isinstance(endpoints, list):
        raise RouteTableError(f"route table: {where}: endpoints must be a list")
    timeout = item.get("timeout_s")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 86400:
        raise RouteTableError(f"route table: {where}: timeout_s must be a number of seconds in (0, 86400]")
    public = item.get("public")
    if not isinstance(public, bool):
        raise RouteTableError(f"route table: {where}: public must be true or false")
    scale_to_zero = item.get("scale_to_zero", False)
    if not isinstance(scale_to_zero, bool):
        raise RouteTableError(f"route table: {where}: scale_to_zero must be true or false")
    return Route(
        name=name,
        kind=kind,
        project=_text(item, "project", where),
        public=public,
        max_concurrency=_count(item, "max_concurrency", where, 1),
        queue_limit=_count(item, "queue_limit", where, 0),
        timeout_s=float(timeout),
        endpoints=tuple(_endpoint(e, f"{where}.endpoints[{j}]") for j, e in enumerate(endpoints)),
        scale_to_zero=scale_to_zero,
    )


def _endpoint(item: object, where: str) -> Endpoint:
    if not isinstance(item, dict):
        raise RouteTableError(f"route table: {where}: expected an object")
    port = _count(item, "port", where, 1)
    if port > 65535:
        raise RouteTableError(f"route table: {where}: port must be 1..65535")
    return Endpoint(replica=_text(item, "replica", where), host=_text(item, "host", where), port=port)


def _check_name(name: str, kind: str, where: str) -> None:
    parts = name.split("/")
    if kind == "job":
        ok = len(parts) == 2 and parts[0] == "jobs" and parts[1].isdigit()
        if not ok:
            raise RouteTableError(f"route table: {where}: a job's route is named jobs/<id>, not {name!r}")
        return
    if len(parts) != 1 or name in RESERVED_NAMES or not all(c.isalnum() or c in "-_." for c in name):
        raise RouteTableError(f"route table: {where}: {name!r} is not a service name (letters, digits, - _ .)")


def _text(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise RouteTableError(f"route table: {where}: {key} must be a non-empty string of at most {MAX_NAME}")
    return value


def _count(item: dict[str, Any], key: str, where: str, least: int) -> int:
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= 1_000_000:
        raise RouteTableError(f"route table: {where}: {key} must be a whole number >= {least}")
    return value

"""The audit log's action names and targets come from the routes themselves: every route that
changes something gets a distinct, stable name without a list to keep."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from unittest.mock import MagicMock

from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from gpupool.api.app import create_app
from gpupool.api.auditing import READ_METHODS, _location_target, action_name, route_target
from gpupool.domain.audit import AuditResult, result_of


def _api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        inner = getattr(route, "original_router", None)  # an included router, in this FastAPI
        if inner is not None:
            yield from _api_routes(inner.routes)


def _changing_routes() -> dict[tuple[str, str], str]:
    app = create_app(MagicMock())
    return {
        (method, route.path_format): action_name(route.path_format, route.name)
        for route in _api_routes(app.routes)
        for method in route.methods or ()
        if method not in READ_METHODS
    }


def test_every_changing_route_has_a_distinct_dotted_name() -> None:
    names = _changing_routes()
    assert all(re.fullmatch(r"[a-z]+\.[a-z_]+", n) for n in names.values()), names
    assert len(set(names.values())) == len(names), names
    assert {
        ("POST", "/api/v1/jobs"): "jobs.submit",
        ("POST", "/api/v1/jobs/{job_id}/cancel"): "jobs.cancel",
        ("POST", "/api/v1/nodes/{name}/drain"): "nodes.drain",
        ("POST", "/api/v1/nodes/{name}/undrain"): "nodes.undrain",
        ("PUT", "/api/v1/projects/{name}"): "projects.set",
        ("DELETE", "/api/v1/projects/{name}"): "projects.delete",
        ("POST", "/api/v1/users"): "users.add",
        ("POST", "/api/v1/users/{name}/disable"): "users.disable",
        ("PUT", "/api/v1/users/{name}/role"): "users.set_role",
        ("DELETE", "/api/v1/users/{name}"): "users.delete",
        ("POST", "/api/v1/tokens"): "tokens.create",
        ("DELETE", "/api/v1/tokens/{token_id}"): "tokens.revoke",
        ("POST", "/api/v1/cluster/join"): "cluster.join",
    }.items() <= names.items()


def test_targets_name_what_the_path_or_location_names() -> None:
    assert route_target("/api/v1/jobs/{job_id}/cancel", {"job_id": 12}) == "job 12"
    assert route_target("/api/v1/nodes/{name}/drain", {"name": "n1"}) == "node n1"
    assert route_target("/api/v1/projects/{name}/members/{user}", {"name": "ml", "user": "bob"}) == (
        "project ml, member bob"
    )
    assert route_target("/api/v1/users", {}) == "users"
    assert _location_target("/api/v1/jobs/7", 201) == "job 7"
    assert _location_target("http://head:7070/api/v1/tokens/3", 201) == "token 3"
    assert _location_target("/api/v1/jobs/7", 409) is None
    assert _location_target(None, 201) is None


def test_results_by_status() -> None:
    assert [result_of(s) for s in (200, 201, 204, 401, 403, 400, 404, 409, 422, 500, 503)] == [
        AuditResult.OK,
        AuditResult.OK,
        AuditResult.OK,
        AuditResult.DENIED,
        AuditResult.DENIED,
        *[AuditResult.INVALID] * 4,
        AuditResult.FAILED,
        AuditResult.FAILED,
    ]

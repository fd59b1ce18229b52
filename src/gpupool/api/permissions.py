"""The permission table: every route of the API and who may call it (rules in ``domain/permissions``).

One table, so that what a role may do is read in one place and a new route cannot ship without a
decision: ``check_routes`` refuses to build an app with a route the table lacks (or a rule for a
route that no longer exists), and ``tests/e2e/test_permissions.py`` walks every (route, role)
pair against a real head.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.routing import BaseRoute, Mount

from gpupool.domain.permissions import Rule, Who
from gpupool.domain.users import Scope

PUBLIC = Rule(Who.PUBLIC)
ANYONE = Rule(Who.ANYONE)
ADMIN = Rule(Who.ADMIN, Scope.ADMIN)

TABLE: dict[tuple[str, str], Rule] = {
    # health, the dashboard's files and the API's own description hold no data
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/"): PUBLIC,
    ("GET", "/ui"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/api/v1/whoami"): ANYONE,
    # jobs: the queue is public (as squeue is); what runs inside a job is its owner's
    ("POST", "/api/v1/jobs"): Rule(Who.MEMBER, Scope.SUBMIT),
    ("GET", "/api/v1/jobs"): ANYONE,  # command and environment only of jobs the caller may act on
    ("GET", "/api/v1/jobs/{job_id}"): ANYONE,  # likewise
    ("GET", "/api/v1/jobs/{job_id}/events"): ANYONE,  # the same events, a page at a time
    ("GET", "/api/v1/jobs/{job_id}/why"): ANYONE,
    ("POST", "/api/v1/jobs/{job_id}/cancel"): Rule(Who.OWNER, Scope.SUBMIT),
    ("GET", "/api/v1/jobs/{job_id}/logs"): Rule(Who.OWNER),
    ("POST", "/api/v1/jobs:batch"): Rule(Who.MEMBER, Scope.SUBMIT),  # of every project the batch names
    # job arrays: as jobs (an array is its tasks, each a job of the same owner and project)
    ("POST", "/api/v1/arrays"): Rule(Who.MEMBER, Scope.SUBMIT),
    ("GET", "/api/v1/arrays"): ANYONE,
    ("GET", "/api/v1/arrays/{array_id}"): ANYONE,
    ("GET", "/api/v1/arrays/{array_id}/tasks/{index}"): ANYONE,
    ("POST", "/api/v1/arrays/{array_id}/cancel"): Rule(Who.OWNER, Scope.SUBMIT),
    # nodes, GPUs, telemetry, alerts, reports, metrics: what a wall dashboard and Prometheus read
    ("GET", "/api/v1/nodes"): ANYONE,
    ("GET", "/api/v1/nodes/{name}"): ANYONE,
    ("GET", "/api/v1/nodes/{name}/telemetry"): ANYONE,
    ("POST", "/api/v1/nodes/{name}/drain"): ADMIN,
    ("POST", "/api/v1/nodes/{name}/undrain"): ADMIN,
    ("POST", "/api/v1/nodes/{name}/calibrate-power"): ADMIN,  # runs work on a free GPU of each model
    ("GET", "/api/v1/power-curves"): ANYONE,
    ("POST", "/api/v1/nodes/{name}/power-budget"): ADMIN,
    ("GET", "/api/v1/telemetry/latest"): ANYONE,
    ("GET", "/api/v1/alerts"): ANYONE,
    ("GET", "/api/v1/gpus/idle"): ANYONE,
    ("GET", "/api/v1/report"): ANYONE,
    ("GET", "/metrics"): ANYONE,
    ("POST", "/api/v1/cluster/join"): Rule(Who.NODE),
    # projects and who belongs to them
    ("GET", "/api/v1/projects"): ANYONE,
    ("GET", "/api/v1/projects/{name}"): ANYONE,
    ("PUT", "/api/v1/projects/{name}"): ADMIN,
    ("DELETE", "/api/v1/projects/{name}"): ADMIN,
    ("GET", "/api/v1/projects/{name}/members"): ANYONE,
    ("PUT", "/api/v1/projects/{name}/members/{user}"): ADMIN,
    ("DELETE", "/api/v1/projects/{name}/members/{user}"): ADMIN,
    # people and their tokens
    ("GET", "/api/v1/users"): ANYONE,
    ("POST", "/api/v1/users"): ADMIN,
    ("POST", "/api/v1/users/{name}/disable"): ADMIN,
    ("POST", "/api/v1/users/{name}/enable"): ADMIN,
    ("PUT", "/api/v1/users/{name}/role"): ADMIN,
    ("PUT", "/api/v1/users/{name}/unix-user"): ADMIN,
    ("DELETE", "/api/v1/users/{name}"): ADMIN,
    ("GET", "/api/v1/tokens"): Rule(Who.SELF),
    ("POST", "/api/v1/tokens"): Rule(Who.SELF, Scope.SUBMIT),
    ("DELETE", "/api/v1/tokens/{token_id}"): Rule(Who.SELF, Scope.SUBMIT),
    # the gateway asks whether a caller's token may use a route (the route's rule is checked inside)
    ("GET", "/api/v1/gateway/authorize"): ANYONE,
    # inference services: public like the queue (command and environment only to those who may act);
    # serving is a member's, scaling and deleting the owner's (or a manager's of its project)
    ("POST", "/api/v1/services"): Rule(Who.MEMBER, Scope.SUBMIT),
    ("GET", "/api/v1/services"): ANYONE,
    ("GET", "/api/v1/services/{name}"): ANYONE,
    ("POST", "/api/v1/services/{name}/scale"): Rule(Who.OWNER, Scope.SUBMIT),
    ("DELETE", "/api/v1/services/{name}"): Rule(Who.OWNER, Scope.SUBMIT),
    # the gateway (its own identity, which no user token can revoke): replicas' endpoints out, their load in
    ("GET", "/api/v1/gateway/routes"): Rule(Who.GATEWAY),
    ("POST", "/api/v1/gateway/stats"): Rule(Who.GATEWAY),
    # images in the nodes' caches: anyone may see what there is to run in; only an admin imports
    # (an imported name stands in for a registry's image on every node)
    ("GET", "/api/v1/images"): ANYONE,
    ("POST", "/api/v1/images"): ADMIN,
    # one's own registry logins (an admin's too: no one sees or changes another's)
    ("GET", "/api/v1/registries"): Rule(Who.SELF),
    ("PUT", "/api/v1/registries/{registry}"): Rule(Who.SELF, Scope.SUBMIT),
    ("DELETE", "/api/v1/registries/{registry}"): Rule(Who.SELF, Scope.SUBMIT),
    # who changed what (api/auditing.py records it)
    ("GET", "/api/v1/audit"): ADMIN,
}


def routes(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) the app answers: what its OpenAPI description lists, and the routes
    kept out of it (the dashboard's redirect and files, the docs pages)."""
    found = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
        if method.upper() in _METHODS
    }
    for route in app.routes:  # routes added to the app itself, not through a router
        if isinstance(route, Mount):
            found.add(("GET", route.path))
        elif isinstance(route, BaseRoute) and isinstance(getattr(route, "path", None), str):
            methods: set[str] = getattr(route, "methods", None) or set()
            found.update((m, route.path) for m in methods if m != "HEAD")  # type: ignore[attr-defined]
    return found


_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


_checked = False  # every app of a process is built by the same create_app: its routes were checked


def check_routes(app: FastAPI, *, again: bool = False) -> None:
    """Refuse an app whose routes and table differ: a route without a rule would be reachable by
    whatever the default happened to be. Listing the routes builds the OpenAPI description
    (~0.2 s), so it is done once per process, not for every app a test builds."""
    global _checked
    if _checked and not again:
        return
    found = routes(app)
    missing, stale = sorted(found - TABLE.keys()), sorted(TABLE.keys() - found)
    if missing or stale:
        raise RuntimeError(
            f"the permission table (api/permissions.py) does not match the routes: "
            f"routes without a rule {missing}, rules without a route {stale}"
        )
    _checked = True


def rule_for(method: str, path_format: str) -> Rule:
    rule = TABLE.get(("GET" if method == "HEAD" else method, path_format))
    if rule is None:  # check_routes makes this unreachable for the app's own routes
        raise RuntimeError(f"no rule for {method} {path_format} in api/permissions.py")
    return rule

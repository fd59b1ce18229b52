"""The app refuses to start when a route has no rule in the permission table, or a rule no route."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from gpupool.api.permissions import TABLE, check_routes


def test_a_route_without_a_rule_or_a_rule_without_a_route_is_refused() -> None:
    app = FastAPI()
    for method, path in TABLE:
        if path.startswith("/api/") or path in ("/healthz", "/metrics"):
            app.add_api_route(path, lambda: None, methods=[method])
    app.mount("/ui", FastAPI())
    app.add_api_route("/", lambda: None, methods=["GET"], include_in_schema=False)
    check_routes(app, again=True)  # exactly the table: accepted

    app.add_api_route("/api/v1/secret", lambda: None, methods=["POST"])
    with pytest.raises(RuntimeError, match=r"routes without a rule \[\('POST', '/api/v1/secret'\)\]"):
        check_routes(app, again=True)

    bare = FastAPI()
    with pytest.raises(RuntimeError, match="rules without a route"):
        check_routes(bare, again=True)

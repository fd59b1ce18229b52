"""The dashboard: ``/`` redirects to ``/ui/``, which serves the single-page app's static files.

The files hold no data, so they need no token; every data call the page makes carries the bearer
token (read once from the URL fragment, which browsers never send to servers). A strict
Content-Security-Policy keeps the page from loading or sending anything outside the head."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from gpupool.dashboard import STATIC_DIR

UI_PATH = "/ui"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


class _DashboardFiles(StaticFiles):
    """Static files with the security headers, revalidated on every load so an upgraded head's
    page is never mixed with a cached older module."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["Content-Security-Policy"] = CSP
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def mount(app: FastAPI) -> None:
    """Serve the dashboard at ``/ui/`` and send ``/`` there."""

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse(f"{UI_PATH}/", status_code=307)

    app.mount(UI_PATH, _DashboardFiles(directory=STATIC_DIR, html=True), name="dashboard")

"""The client's service (and image) calls, apart from ``http.py`` so that each module stays small;
mixed into ``GpupoolClient``, which supplies ``_call`` and ``_send``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote


class ServiceCalls:
    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    def serve(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create or update a service (the body of ``POST /api/v1/services``)."""
        return dict(self._call("POST", "/api/v1/services", json=body))

    def services(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/v1/services"))

    def service(self, name: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/api/v1/services/{name}"))

    def scale_service(self, name: str, replicas: int) -> dict[str, Any]:
        return dict(self._call("POST", f"/api/v1/services/{name}/scale", json={"replicas": replicas}))

    def delete_service(self, name: str) -> None:
        self._send("DELETE", f"/api/v1/services/{name}")

    def gateway_routes(self) -> dict[str, Any]:
        return dict(self._call("GET", "/api/v1/gateway/routes"))

    def gateway_stats(self, window_s: float, replicas: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(self._call("POST", "/api/v1/gateway/stats", json={"window_s": window_s, "replicas": replicas}))

    def images(self) -> dict[str, Any]:
        """What each node's image cache holds: ``{"images": [...], "skipped": [...]}``."""
        return dict(self._call("GET", "/api/v1/images"))

    def registry_logins(self) -> list[dict[str, Any]]:
        """The registries the caller logged in to (``registry``, ``username``, ``saved_at``)."""
        return list(self._call("GET", "/api/v1/registries"))

    def registry_login(self, registry: str, username: str, password: str) -> dict[str, Any]:
        """Keep the caller's login to ``registry`` at the head, for the nodes' pulls of their images."""
        body = {"username": username, "password": password}
        return dict(self._call("PUT", f"/api/v1/registries/{quote(registry, safe='')}", json=body))

    def registry_logout(self, registry: str) -> None:
        self._send("DELETE", f"/api/v1/registries/{quote(registry, safe='')}")

    def import_image(self, path: str, name: str) -> dict[str, Any]:
        """Import the OCI archive at ``path`` (on the nodes' shared file system) as ``name`` on every node."""
        return dict(self._call("POST", "/api/v1/images", json={"path": path, "name": name}))

    def calibrate_power(self, node: str, bound_s: float) -> list[dict[str, Any]]:
        """Measure ``node``'s GPU models' power curves (admin); each model may take ``bound_s``."""
        return list(self._call("POST", f"/api/v1/nodes/{node}/calibrate-power", json={"bound_s": bound_s}))

    def power_curves(self) -> list[dict[str, Any]]:
        """Every GPU model's calibrated power curve."""
        return list(self._call("GET", "/api/v1/power-curves"))

    def set_power_budget(self, name: str, budget: str) -> dict[str, Any]:
        """A node's own power budget (admin): ``3kW``, or ``none`` (issue 33)."""
        return dict(self._call("POST", f"/api/v1/nodes/{quote(name)}/power-budget", json={"budget": budget}))

"""The client's project calls, apart from ``http.py`` so that each module stays small; mixed into
``GpupoolClient``, which supplies ``_call`` and ``_send``."""

from __future__ import annotations

from typing import Any


class ProjectCalls:
    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    def projects(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/v1/projects"))

    def set_project(
        self,
        name: str,
        quota: float,
        limit: float | None,
        weight: float,
        idle_timeout_s: float | None = None,
        everyone: bool | None = None,
        gpu_power: str | None = None,
        parent: str | None = None,
        user_limit: float | None = None,
        user_limits: dict[str, float | None] | None = None,
        lend_limit: float | None = None,
        per_model: dict[str, dict[str, float]] | None = None,
    ) -> dict[str, Any]:
        """``everyone``, ``parent`` ("" for none): ``None`` leaves them as they were. ``gpu_power``: jobs' default."""
        body: dict[str, Any] = {"quota": quota, "limit": limit, "weight": weight, "idle_timeout_s": idle_timeout_s}
        given: dict[str, Any] = {"everyone": everyone, "gpu_power": gpu_power, "parent": parent}
        given |= {"user_limit": user_limit, "user_limits": user_limits, "lend_limit": lend_limit, **(per_model or {})}
        body |= {k: v for k, v in given.items() if v is not None and v != {}}  # only what is given: older heads take it
        return dict(self._call("PUT", f"/api/v1/projects/{name}", json=body))

    def members(self, project: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/api/v1/projects/{project}/members"))

    def add_member(self, project: str, user: str, role: str = "member") -> dict[str, Any]:
        return dict(self._call("PUT", f"/api/v1/projects/{project}/members/{user}", json={"role": role}))

    def remove_member(self, project: str, user: str) -> None:
        self._send("DELETE", f"/api/v1/projects/{project}/members/{user}")

    def delete_project(self, name: str) -> None:
        self._send("DELETE", f"/api/v1/projects/{name}")

"""HTTP client for the head. Errors come back as ``ClientError(code, message)`` — the same
``{code, message}`` the API sends — so callers never parse HTTP themselves."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Unpack
from urllib.parse import urlsplit

from gpupool.client import transport as plain

# Defined in errors.py (light, for the CLI's start) and still importable from here.
from gpupool.client.errors import CA_ENV as CA_ENV
from gpupool.client.errors import INSECURE_ENV as INSECURE_ENV
from gpupool.client.errors import ClientError as ClientError
from gpupool.client.errors import HeadUnreachable as HeadUnreachable
from gpupool.client.errors import is_loopback as is_loopback
from gpupool.client.projects import ProjectCalls
from gpupool.client.services import ServiceCalls
from gpupool.domain.errors import InvalidInput

if TYPE_CHECKING:
    import ssl

    import httpx

    from gpupool.domain.jobs import JobSpec, Submission


def _plain(value: object) -> object:
    """JSON-ready: a sequence (the command) as a list, a mapping (the environment) as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return value


def new_idempotency_key() -> str:
    """A random (version 4) UUID, as ``str(uuid.uuid4())`` writes it, without importing ``uuid``
    (~8 ms of a command's start: it loads ``platform``)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


SUBMIT_RETRIES = (0.2, 0.5, 1.0, 2.0)  # ~4 s of a head restarting or a network blip


class LogChunk(NamedTuple):
    data: bytes
    next_offset: int
    finished: bool


def check_url(url: str, insecure: bool = False) -> str:
    """The head's URL, read as a URL (not by its prefix): http or https with a host; plain http only
    to this machine (a loopback address or localhost) unless ``insecure``, because every request
    carries a token."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        host = None
    if host is None or parts.scheme not in ("http", "https"):
        raise InvalidInput(f"malformed head URL {url!r}: use e.g. https://gpu-head.example.org:7070")
    if parts.scheme == "http" and not insecure and not is_loopback(host):
        raise InvalidInput(
            f"refusing to send a token in clear text to {host}: use https:// (the head's --tls-cert), "
            "or --insecure if the network between you is trusted"
        )
    return url.strip().rstrip("/")


def _ca_context(ca: str) -> ssl.SSLContext:
    """A context trusting the bundle ``ca``; read even for plain http, so a bad --ca is said at once."""
    import ssl

    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidInput(f"cannot use {ca} as the CA bundle (--ca): {exc}") from None


class _Response(Protocol):
    """What the client reads of an answer, from httpx or the plain transport alike."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def content(self) -> bytes: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...


class GpupoolClient(ServiceCalls, ProjectCalls):
    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        ca: str | None = None,
        insecure: bool | None = None,
    ) -> None:
        """``ca``: a CA bundle for the head's certificate (default: $GPUPOOL_CA, else the system's);
        ``insecure``: allow plain http beyond this machine (default: $GPUPOOL_INSECURE). With a
        ``transport`` of the caller's own (an app in the same process), it decides where requests
        go, and the URL is only checked for its form.

        Plain http without a proxy goes through the standard library (client/transport.py), as
        importing httpx would cost the CLI ~0.2 s a command; everything else through httpx."""
        if insecure is None:
            insecure = os.environ.get(INSECURE_ENV, "").lower() in ("1", "true", "yes")
        self.url = check_url(url, insecure or transport is not None)
        ca = ca or os.environ.get(CA_ENV) or None
        verify: ssl.SSLContext | bool = _ca_context(ca) if ca else True
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http: httpx.Client | plain.PlainHTTP
        if transport is None and plain.usable(self.url, os.environ):
            self._http = plain.PlainHTTP(self.url, headers, timeout)
            self._transport_errors = plain.TRANSPORT_ERRORS
        else:
            import httpx

            self._http = httpx.Client(
                base_url=self.url, headers=headers, timeout=timeout, transport=transport, verify=verify
            )
            self._transport_errors = (httpx.TransportError,)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GpupoolClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        return dict(self._call("GET", "/healthz"))

    def whoami(self) -> dict[str, Any]:
        """Who the token belongs to: ``{"user", "role"}`` (and whatever the head adds)."""
        return dict(self._call("GET", "/api/v1/whoami"))

    def submit(
        self, spec: JobSpec | None = None, *, idempotency_key: str | None = None, **fields: Unpack[Submission]
    ) -> dict[str, Any]:
        """Submit a job; returns it as the API shows it (``id``, ``state``, ...).

        Give a ``JobSpec`` (``JobSpec.create(...)`` checks it here, with the head's own rules)
        or the same keywords directly, which the head checks: ``submit(command=[...], gpus=2)``.
        Each submission carries an ``Idempotency-Key`` (a new UUID unless given) and is sent again,
        with the same key, when the connection fails before an answer: the head makes the job once.
        """
        if spec is not None and fields:
            raise TypeError("submit() takes a JobSpec or keyword fields, not both")
        plain = {k: _plain(v) for k, v in fields.items() if v is not None}
        body = spec.submission() if spec is not None else plain
        headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()}
        return dict(self._send("POST", "/api/v1/jobs", retries=SUBMIT_RETRIES, json=body, headers=headers).json())

    def submit_array(
        self, spec: JobSpec | Mapping[str, Any], array: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """A job array (``array``: Slurm's syntax, e.g. ``0-999%50``), retried as ``submit`` is.
        ``spec``: a JobSpec, or the body its ``submission()`` gives (``job_fields.submission_body``)."""
        headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()}
        asked = dict(spec) if isinstance(spec, Mapping) else spec.submission()
        body = {**asked, "array": array}
        return dict(self._send("POST", "/api/v1/arrays", retries=SUBMIT_RETRIES, json=body, headers=headers).json())

    def submit_batch(self, specs: Sequence[JobSpec]) -> list[dict[str, Any]]:
        """Up to 1,000 jobs, made all or none in one request."""
        return list(self._call("POST", "/api/v1/jobs:batch", json={"jobs": [s.submission() for s in specs]}))

    def arrays_page(
        self, include_finished: bool = False, limit: int = 1000, user: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        params: dict[str, Any] = {"all": str(include_finished).lower(), "limit": limit}
        if user is not None:
            params["user"] = user
        response = self._send("GET", "/api/v1/arrays", params=params)
        return list(response.json()), int(response.headers.get("X-Total-Count", 0))

    def array(self, array_id: int) -> dict[str, Any]:
        return dict(self._call("GET", f"/api/v1/arrays/{array_id}"))

    def array_task(self, array_id: int, index: int) -> dict[str, Any]:
        return dict(self._call("GET", f"/api/v1/arrays/{array_id}/tasks/{index}"))

    def cancel_array(self, array_id: int) -> dict[str, Any]:
        return dict(self._call("POST", f"/api/v1/arrays/{array_id}/cancel"))

    def jobs(self, include_finished: bool = False, limit: int = 1000, user: str | None = None) -> list[dict[str, Any]]:
        return self.jobs_page(include_finished, limit, user)[0]

    def jobs_page(
        self, include_finished: bool = False, limit: int = 1000, user: str | None = None, tasks: bool = True
    ) -> tuple[list[dict[str, Any]], int]:
        """The newest ``limit`` jobs (``user``'s only, if given; without arrays' tasks unless
        ``tasks``), and how many match in all."""
        params: dict[str, Any] = {"all": str(include_finished).lower(), "limit": limit}
        if not tasks:
            params["tasks"] = "false"
        if user is not None:
            params["user"] = user
        response = self._send("GET", "/api/v1/jobs", params=params)
        listing = list(response.json())
        return listing, int(response.headers.get("X-Total-Count", len(listing)))

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self._call("GET", f"/api/v1/jobs/{job_id}"))

    def events(self, job_id: int, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """A page of the job's events, oldest first: pass the last ``id`` seen as ``after``."""
        return list(self._call("GET", f"/api/v1/jobs/{job_id}/events", params={"after": after, "limit": limit}))

    def cancel(self, job_id: int) -> dict[str, Any]:
        return dict(self._call("POST", f"/api/v1/jobs/{job_id}/cancel"))

    def why(self, job_id: int) -> dict[str, Any]:
        return dict(self._call("GET", f"/api/v1/jobs/{job_id}/why"))

    def users(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/v1/users"))

    def add_user(
        self, name: str, role: str = "member", unix_user: str | None = None, shared_account: bool = False
    ) -> dict[str, Any]:
        """A new user; the answer holds their first ``token``, shown this once."""
        shared = {"shared_account": True} if shared_account else {}
        body = {"name": name, "role": role, "unix_user": unix_user, **shared}
        return dict(self._call("POST", "/api/v1/users", json=body))

    def disable_user(self, name: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/api/v1/users/{name}/disable"))

    def enable_user(self, name: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/api/v1/users/{name}/enable"))

    def set_user_role(self, name: str, role: str) -> dict[str, Any]:
        return dict(self._call("PUT", f"/api/v1/users/{name}/role", json={"role": role}))

    def set_unix_user(self, name: str, unix_user: str | None, shared_account: bool = False) -> dict[str, Any]:
        body = {"unix_user": unix_user, **({"shared_account": True} if shared_account else {})}
        return dict(self._call("PUT", f"/api/v1/users/{name}/unix-user", json=body))

    def delete_user(self, name: str) -> None:
        self._send("DELETE", f"/api/v1/users/{name}")

    def tokens(self, user: str | None = None) -> list[dict[str, Any]]:
        """Tokens not revoked: one's own, or (for an admin) everyone's or ``user``'s."""
        return list(self._call("GET", "/api/v1/tokens", params={"user": user} if user else {}))

    def create_token(
        self,
        user: str | None = None,
        name: str | None = None,
        scope: str | None = None,
        expires_in_s: float | None = None,
    ) -> dict[str, Any]:
        """A new token (the caller's by default); the answer holds ``token``, shown this once."""
        body = {"user": user, "name": name, "scope": scope, "expires_in_s": expires_in_s}
        return dict(self._call("POST", "/api/v1/tokens", json=body))

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        return dict(self._call("DELETE", f"/api/v1/tokens/{token_id}"))

    def nodes(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/v1/nodes"))

    def telemetry(
        self,
        node: str,
        gpu: int | None = None,
        since: str | None = None,
        until: str | None = None,
        resolution: str | None = None,
    ) -> dict[str, Any]:
        """A node's GPU history; ``since``/``until``: ISO 8601 times or durations ago (``15m``)."""
        given = {"gpu": gpu, "since": since, "until": until, "resolution": resolution}
        params = {k: v for k, v in given.items() if v is not None}
        return dict(self._call("GET", f"/api/v1/nodes/{node}/telemetry", params=params))

    def latest_telemetry(self, since: str | None = None) -> list[dict[str, Any]]:
        """The newest reading of every GPU; ``since``: only readings this recent (``1m``, ISO 8601)."""
        params = {"since": since} if since is not None else {}
        return list(self._call("GET", "/api/v1/telemetry/latest", params=params))

    def alerts(self, include_cleared: bool = False) -> list[dict[str, Any]]:
        """Active alerts (with ``include_cleared``, cleared ones of the last 30 days too)."""
        return list(self._call("GET", "/api/v1/alerts", params={"all": "true"} if include_cleared else {}))

    def idle_gpus(self) -> list[dict[str, Any]]:
        """GPUs allocated to a job but idle for the head's idle time."""
        return list(self._call("GET", "/api/v1/gpus/idle"))

    def report(self, since: str | None = None, until: str | None = None, by: str | None = None) -> dict[str, Any]:
        """Accounting per project, user or job; ``since``/``until``: ISO 8601 or a duration ago (``7d``)."""
        given = {"since": since, "until": until, "by": by}
        return dict(self._call("GET", "/api/v1/report", params={k: v for k, v in given.items() if v is not None}))

    def audit(self, since: str | None = None, user: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """The audit log, newest first (admins): ``since`` an ISO 8601 time or a duration ago (1d)."""
        given = {"since": since, "user": user, "limit": limit}
        return list(self._call("GET", "/api/v1/audit", params={k: v for k, v in given.items() if v is not None}))

    def drain(self, name: str, gpu: int | None = None, reason: str | None = None) -> dict[str, Any]:
        """Drain a node, or with ``gpu`` take that GPU out of service (admin only)."""
        return dict(self._call("POST", f"/api/v1/nodes/{name}/drain", json={"gpu": gpu, "reason": reason}))

    def undrain(self, name: str, gpu: int | None = None, reason: str | None = None) -> dict[str, Any]:
        return dict(self._call("POST", f"/api/v1/nodes/{name}/undrain", json={"gpu": gpu, "reason": reason}))

    def join(self, name: str) -> dict[str, Any]:
        """The Ray address and token for a node joining the cluster (needs the join token)."""
        return dict(self._call("POST", "/api/v1/cluster/join", json={"name": name}))

    def logs(self, job_id: int, worker: int = 0, offset: int = 0) -> LogChunk:
        response = self._send("GET", f"/api/v1/jobs/{job_id}/logs", params={"worker": worker, "offset": offset})
        return LogChunk(
            response.content,
            int(response.headers.get("X-Gpupool-Next-Offset", offset)),
            response.headers.get("X-Gpupool-Finished") == "1",
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()

    def _send(self, method: str, path: str, retries: Sequence[float] = (), **kwargs: Any) -> _Response:
        """``retries``: pauses before sending again after a failed connection (only for requests
        that are safe to repeat)."""
        for pause in (*retries, None):
            try:
                response: _Response = self._http.request(method, path, **kwargs)
                break
            except self._transport_errors as exc:
                if pause is None:
                    raise HeadUnreachable(
                        f"cannot reach the gpupool head at {self.url} ({exc}); "
                        "start one with gpupool up, or set --url / GPUPOOL_URL"
                    ) from None
                time.sleep(pause)
        if response.status_code >= 400:
            try:
                body = response.json()
                code, message = str(body["code"]), str(body["message"])
            except (ValueError, KeyError, TypeError):
                code, message = "http_error", f"HTTP {response.status_code}: {response.text[:200]}"
            raise ClientError(response.status_code, code, message)
        return response

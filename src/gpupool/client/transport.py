"""Plain-http requests on the standard library's ``http.client``, for the CLI's everyday case: a
head on this machine (or a trusted network) over http, no proxy. Importing httpx costs ~0.2 s of a
command's start; ``http.client`` ~0.05 s. ``GpupoolClient`` (client/http.py) picks this or httpx
and answers the same either way; HTTPS, proxies and a caller's own transport go through httpx.

It sends what httpx would send for the client's requests (the same JSON bytes, query strings,
``Authorization`` and ``Idempotency-Key`` headers) and a failed connection raises
``TRANSPORT_ERRORS``, as httpx raises ``httpx.TransportError``.
"""

from __future__ import annotations

import http.client
import json as jsonlib
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

# What a request that got no answer raises: a refused or reset connection, a timeout (OSError),
# or a reply that is not HTTP (HTTPException; RemoteDisconnected is both).
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (OSError, http.client.HTTPException)
_PROXY_VARS = frozenset({"http_proxy", "all_proxy"})


def usable(url: str, environ: Mapping[str, str]) -> bool:
    """Whether this transport reaches ``url`` as httpx would: plain http, and no proxy in the
    environment for it (httpx honours http_proxy/all_proxy, in either case; this does not)."""
    if urlsplit(url).scheme != "http":
        return False
    return not any(v for k, v in environ.items() if k.lower() in _PROXY_VARS)


class Headers(Mapping[str, str]):
    """A response's headers, looked up regardless of case (as httpx's are)."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._by_name: dict[str, str] = {}
        for name, value in items:
            key = name.lower()
            # httpx joins a repeated header's values with ", "
            self._by_name[key] = f"{self._by_name[key]}, {value}" if key in self._by_name else value

    def __getitem__(self, name: str) -> str:
        return self._by_name[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


class Response:
    def __init__(self, status_code: int, headers: Headers, content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class PlainHTTP:
    """The part of ``httpx.Client`` the client uses: ``request(method, path, params=, json=,
    headers=)`` against a base URL, with default headers and one timeout. Each request opens its
    own connection (a loopback connect costs well under a millisecond), so an idle connection the
    head closed is never reused."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.hostname is None:
            raise ValueError(f"no host in {base_url!r}")
        self._host, self._port = parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/")
        self._headers = dict(headers)
        self._timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        # As httpx does: what a path may not hold (a space in a name a person typed) is
        # percent-encoded, so the head answers it (a 4xx) instead of http.client refusing it.
        target = quote(self._prefix + path, safe="/!$&'()*+,;=:@%~")
        if params:
            target += "?" + urlencode({k: _param(v) for k, v in params.items()})
        send = {**self._headers, **(headers or {})}
        body: bytes | None = None
        if json is not None:
            body = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
            send["Content-Type"] = "application/json"
        elif method in ("POST", "PUT", "PATCH"):
            body = b""  # httpx sends Content-Length: 0
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            conn.request(method, target, body=body, headers=send)
            answer = conn.getresponse()
            content = answer.read()
            return Response(answer.status, Headers(answer.getheaders()), content)
        finally:
            conn.close()

    def close(self) -> None:
        pass


def _param(value: object) -> str:
    """A query value as httpx writes it: JSON-style booleans, None as empty."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "" if value is None else str(value)

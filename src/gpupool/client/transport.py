"""Plain-http requests on a socket, for the CLI's everyday case: a head on this machine (or a
trusted network) over http, no proxy. Importing httpx costs ~0.2 s of a command's start, the
standard library's ``http.client`` ~20 ms (it loads ``ssl`` and the email parser); one HTTP/1.1
request with ``Connection: close`` and its answer read to the end need neither. ``GpupoolClient``
(client/http.py) picks this or httpx and answers the same either way; HTTPS, proxies and a
caller's own transport go through httpx.

It sends what httpx would send for the client's requests (the same JSON bytes, query strings,
``Authorization`` and ``Idempotency-Key`` headers) and a failed connection raises
``TRANSPORT_ERRORS``, as httpx raises ``httpx.TransportError``.
"""

from __future__ import annotations

import json as jsonlib
import socket
from collections.abc import Iterator, Mapping
from typing import Any, cast
from urllib.parse import quote, urlencode, urlsplit

from gpupool.domain.errors import InvalidInput


class BadReply(Exception):
    """What came back is not an HTTP answer (or stopped in the middle of one)."""


# What a request that got no answer raises: a refused or reset connection, a timeout (OSError),
# or a reply that is not HTTP.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (OSError, BadReply)
_MOST = 1 << 30  # an answer larger than this is not the head's
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
        # An ASCII host goes to getaddrinfo as bytes: as a str it is encoded with the idna codec,
        # whose import (with stringprep) is ~1 ms of a command's start, to the same bytes.
        self._address: str | bytes = self._host.encode("ascii") if self._host.isascii() else self._host
        host = f"[{self._host}]" if ":" in self._host else self._host  # as http.client writes Host
        self._host_header = host if self._port is None else f"{host}:{self._port}"

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
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}", "Accept-Encoding: identity"]
        for name, value in send.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise InvalidInput(f"the {name} header may not hold a line break")
            lines.append(f"{name}: {value}")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        lines.append("Connection: close")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        address = cast(str, self._address)  # getaddrinfo takes bytes too; typeshed says str
        with socket.create_connection((address, self._port or 80), timeout=self._timeout) as sock:
            sock.sendall(request)
            return _read_answer(sock, head_only=method == "HEAD")

    def close(self) -> None:
        pass


def _read_answer(sock: socket.socket, *, head_only: bool) -> Response:
    """The answer on ``sock``, read until the head closes the connection (the request said
    ``Connection: close``): its status, headers and body (a chunked body put back together)."""
    parts: list[bytes] = []
    size = 0
    while chunk := sock.recv(65536):
        parts.append(chunk)
        size += len(chunk)
        if size > _MOST:
            raise BadReply("the answer is too large")
    raw = b"".join(parts)
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        raise BadReply("the connection closed before the answer's headers ended")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, _, tail = status_line.partition(" ")
    code = tail[:3]
    if not version.startswith("HTTP/") or not code.isdigit():
        raise BadReply(f"not an HTTP answer: {status_line[:80]!r}")
    items = []
    for line in header_lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise BadReply(f"a malformed header line: {line[:80]!r}")
        items.append((name.strip(), value.strip()))
    headers = Headers(items)
    status = int(code)
    if head_only or status in (204, 304) or 100 <= status < 200:
        return Response(status, headers, b"")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Response(status, headers, _unchunk(rest))
    length = headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit() or len(rest) < int(length):
            raise BadReply("the connection closed before the answer's body ended")
        rest = rest[: int(length)]
    return Response(status, headers, rest)


def _unchunk(data: bytes) -> bytes:
    body = bytearray()
    at = 0
    while True:
        end = data.find(b"\r\n", at)
        if end < 0:
            raise BadReply("a chunked body ended early")
        try:
            size = int(data[at:end].split(b";", 1)[0], 16)
        except ValueError:
            raise BadReply("a malformed chunk size") from None
        if size == 0:
            return bytes(body)
        start = end + 2
        if start + size > len(data):
            raise BadReply("a chunked body ended early")
        body += data[start : start + size]
        at = start + size + 2


def _param(value: object) -> str:
    """A query value as httpx writes it: JSON-style booleans, None as empty."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "" if value is None else str(value)

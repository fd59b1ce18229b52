"""Request and response heads as they cross the gateway, built by pure functions over byte pairs.

What a proxy owes both sides (RFC 9110 7.6): hop-by-hop headers (``Connection`` and those it
names, ``Keep-Alive``, ``Transfer-Encoding``, ...) describe one connection and are not passed on;
the body's framing is chosen anew for each side (a chunked answer is chunked again for an HTTP/1.1
client, and close-delimited for an HTTP/1.0 one); the replica learns whom it serves from
``X-Forwarded-For``/``-Proto``/``-Host``/``-Prefix``. The caller's gpupool token never reaches a
replica, public or not: the replica runs someone's code, and the token is the caller's. Who called
is told instead, where the gateway checked it (``X-Gpupool-User``, ``X-Gpupool-Project``); the same
headers sent by a client are dropped, so a replica reached through the gateway may trust them.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence

Headers = Sequence[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_FORWARDED = frozenset({b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-prefix"})
# Never passed on: the caller's gpupool credentials, and any claim of who called but the gateway's own.
CREDENTIALS = frozenset({b"authorization", b"x-gpupool-user", b"x-gpupool-project"})
NO_BODY_STATUS = frozenset({204, 304})
_PLAIN_CONNECTION = frozenset({b"keep-alive", b"Keep-Alive", b"close", b"Close", b"upgrade", b"Upgrade"})
_SKIP_UP = HOP_BY_HOP | _FORWARDED | CREDENTIALS
_NAME_SAFE = re.compile(rb"[A-Za-z0-9._-]{1,128}")


# The gateway's own answers' reason phrases (a replica's pass on as it gave them).
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class Framing(enum.Enum):
    NONE = "none"  # no body
    LENGTH = "length"  # Content-Length bytes follow
    CHUNKED = "chunked"  # chunks, each sent as it comes
    CLOSE = "close"  # the body ends when the connection closes (HTTP/1.0 style)


def request_framing(headers: Headers) -> Framing:
    """How a request's body is framed: chunked, a length, or none (a request cannot end at close)."""
    framing = Framing.NONE
    for name, value in headers:
        lower = name.lower()
        if lower == b"transfer-encoding" and b"chunked" in value.lower():
            return Framing.CHUNKED
        if lower == b"content-length":
            framing = Framing.NONE if value.strip() == b"0" else Framing.LENGTH
    return framing


def request_body(headers: Headers) -> tuple[Framing, int | None]:
    """``request_framing`` and ``content_length`` in one pass (each request needs both)."""
    framing, length, seen = Framing.NONE, None, False
    for name, value in headers:
        lower = name.lower()
        if lower == b"transfer-encoding":
            if b"chunked" in value.lower():
                framing = Framing.CHUNKED
        elif lower == b"content-length":
            if not seen:
                seen = True
                try:
                    length = int(value)
                except ValueError:
                    length = None
            if framing is not Framing.CHUNKED:
                framing = Framing.NONE if value.strip() == b"0" else Framing.LENGTH
    return framing, length


def content_length(headers: Headers) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def bearer(headers: Headers) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if there is one."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip().decode("latin-1")
            return None
    return None


def identity(user: str | None, project: str | None) -> bytes:
    """The header lines that tell a replica who called; nothing unless both are names as gpupool
    allows them (so nothing a client chose can end a header line)."""
    who, where = (user or "").encode("latin-1", "replace"), (project or "").encode("latin-1", "replace")
    if not (_NAME_SAFE.fullmatch(who) and _NAME_SAFE.fullmatch(where)):
        return b""
    return b"X-Gpupool-User: " + who + b"\r\nX-Gpupool-Project: " + where + b"\r\n"


def upstream_head(
    method: bytes,
    target: bytes,
    headers: Headers,
    *,
    client: str,
    prefix: bytes,
    framing: Framing,
    caller: bytes = b"",
    upgrade: bool = False,
) -> bytes:
    """The request head sent to a replica: ``target`` already has the route's prefix removed
    (``prefix``, sent as ``X-Forwarded-Prefix``), or ``prefix`` is empty where it was kept.
    ``caller``: ``identity``'s lines, or nothing where the caller was not checked (a public route)."""
    fields = upstream_fields(headers, client=client, prefix=prefix, framing=framing, caller=caller, upgrade=upgrade)
    return b"".join((method, b" ", target, b" HTTP/1.1\r\n", fields))


def upstream_fields(
    headers: Headers, *, client: str, prefix: bytes, framing: Framing, caller: bytes, upgrade: bool
) -> bytes:
    """The header lines of ``upstream_head``, through the blank line that ends the head.

    One pass over the headers, each lowered once: this runs for every request. A ``Connection``
    header that names a header beyond the hop-by-hop ones (rare) sends the head through
    ``_upstream_fields_named``, which drops the named ones wherever they stand."""
    skip = _SKIP_UP
    lines: list[bytes] = []
    forwarded_for = host = b""
    for name, value in headers:
        lower = name.lower()
        if lower in skip:
            if lower == b"x-forwarded-for":
                forwarded_for = value.strip() + b", "
            elif lower == b"connection" and _names_others(value):
                return _upstream_fields_named(headers, client, prefix, framing, caller, upgrade)
            continue
        if lower == b"host":
            host = value
        lines += (name, b": ", value, b"\r\n")
    lines += (b"X-Forwarded-For: ", forwarded_for, client.encode("latin-1"), b"\r\nX-Forwarded-Proto: http\r\n")
    if prefix:  # the prefix taken off the path; none where the path keeps it (a job's port)
        lines += (b"X-Forwarded-Prefix: ", prefix, b"\r\n")
    if host:
        lines += (b"X-Forwarded-Host: ", host, b"\r\n")
    lines.append(caller)
    if framing is Framing.CHUNKED:
        lines.append(b"Transfer-Encoding: chunked\r\n")
    if upgrade:
        lines += (b"Connection: upgrade\r\nUpgrade: ", _value(headers, b"upgrade"), b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


def _upstream_fields_named(
    headers: Headers,
    client: str,
    prefix: bytes,
    framing: Framing,
    caller: bytes,
    upgrade: bool,
) -> bytes:
    """``upstream_fields`` when ``Connection`` names more headers to drop."""
    skip = _connection_named(headers) | HOP_BY_HOP | _FORWARDED | CREDENTIALS
    lines: list[bytes] = []
    forwarded_for = b""
    host = b""
    for name, value in headers:
        lower = name.lower()
        if lower == b"x-forwarded-for":
            forwarded_for = value.strip() + b", "
        elif lower == b"host":
            host = value
        if lower not in skip:
            lines += [name, b": ", value, b"\r\n"]
    lines += [b"X-Forwarded-For: ", forwarded_for, client.encode("latin-1"), b"\r\n"]
    lines.append(b"X-Forwarded-Proto: http\r\n")
    if prefix:  # the prefix taken off the path; none where the path keeps it (a job's port)
        lines += [b"X-Forwarded-Prefix: ", prefix, b"\r\n"]
    if host:
        lines += [b"X-Forwarded-Host: ", host, b"\r\n"]
    lines.append(caller)
    if framing is Framing.CHUNKED:
        lines.append(b"Transfer-Encoding: chunked\r\n")
    if upgrade:
        lines += [b"Connection: upgrade\r\nUpgrade: ", _value(headers, b"upgrade"), b"\r\n"]
    lines.append(b"\r\n")
    return b"".join(lines)


def response_framing(status: int, headers: Headers, *, head_request: bool, chunked: bool) -> Framing:
    """How a replica's answer is framed: ``chunked`` is what the response parser saw."""
    if head_request or status in NO_BODY_STATUS or 100 <= status < 200:
        return Framing.NONE
    if chunked:
        return Framing.CHUNKED
    return Framing.LENGTH if content_length(headers) is not None else Framing.CLOSE


def client_framing(upstream: Framing, client_http11: bool) -> Framing:
    """The framing the client gets: a length or nothing passes as it is; a body of unknown length
    is chunked for an HTTP/1.1 client (so the connection stays open) and ends at close otherwise."""
    if upstream in (Framing.NONE, Framing.LENGTH):
        return upstream
    return Framing.CHUNKED if client_http11 else Framing.CLOSE


def downstream_head(
    status: int,
    reason: bytes,
    headers: Headers,
    *,
    framing: Framing,
    keep_alive: bool,
    http11: bool = True,
    upgrade: bool = False,
) -> bytes:
    """The response head sent to the client."""
    skip = _connection_named(headers) | HOP_BY_HOP
    lines = [b"HTTP/1.1 %d " % status, reason or b"-", b"\r\n"]
    for name, value in headers:
        if name.lower() not in skip:
            lines += [name, b": ", value, b"\r\n"]
    if upgrade:
        lines += [b"Connection: upgrade\r\nUpgrade: ", _value(headers, b"upgrade"), b"\r\n\r\n"]
        return b"".join(lines)
    if framing is Framing.CHUNKED:
        lines.append(b"Transfer-Encoding: chunked\r\n")
    if not keep_alive or framing is Framing.CLOSE:
        lines.append(b"Connection: close\r\n\r\n")
    else:  # an HTTP/1.0 client closes unless told otherwise
        lines.append(b"\r\n" if http11 else b"Connection: keep-alive\r\n\r\n")
    return b"".join(lines)


def response_head(
    status: int, reason: bytes, headers: Headers, *, head_request: bool, http11: bool, keep_alive: bool
) -> tuple[bytes, Framing]:
    """A replica's final (not 1xx) answer head as the client gets it, and the client's framing:
    ``response_framing``, ``client_framing`` and ``downstream_head`` in one pass over the headers
    (``keep_alive``: the client's request allows it). A ``Connection`` header naming more headers
    than the hop-by-hop ones goes the long way."""
    lines = [b"HTTP/1.1 %d " % status, reason or b"-", b"\r\n"]
    chunked = False
    length: bytes | None = None
    for name, value in headers:
        lower = name.lower()
        if lower in HOP_BY_HOP:
            if lower == b"transfer-encoding":
                chunked = chunked or b"chunked" in value.lower()
            elif lower == b"connection" and _names_others(value):
                return _response_head_named(status, reason, headers, head_request, http11, keep_alive)
            continue
        if lower == b"content-length" and length is None:
            length = value
        lines += (name, b": ", value, b"\r\n")
    if head_request or status in NO_BODY_STATUS:
        framing = Framing.NONE
    elif chunked:
        framing = Framing.CHUNKED if http11 else Framing.CLOSE
    elif length is not None and _is_int(length):
        framing = Framing.LENGTH
    else:
        framing = Framing.CHUNKED if http11 else Framing.CLOSE
    if framing is Framing.CHUNKED:
        lines.append(b"Transfer-Encoding: chunked\r\n")
    if not keep_alive or framing is Framing.CLOSE:
        lines.append(b"Connection: close\r\n\r\n")
    else:
        lines.append(b"\r\n" if http11 else b"Connection: keep-alive\r\n\r\n")
    return b"".join(lines), framing


def _response_head_named(
    status: int, reason: bytes, headers: Headers, head_request: bool, http11: bool, keep_alive: bool
) -> tuple[bytes, Framing]:
    chunked = any(n.lower() == b"transfer-encoding" and b"chunked" in v.lower() for n, v in headers)
    framing = client_framing(response_framing(status, headers, head_request=head_request, chunked=chunked), http11)
    keep = keep_alive and framing is not Framing.CLOSE
    return downstream_head(status, reason, headers, framing=framing, keep_alive=keep, http11=http11), framing


def simple_response(status: int, reason: str, body: str, *, extra: Iterable[tuple[str, str]] = ()) -> bytes:
    """A whole small answer the gateway gives itself (404, 429, 502, ...), as JSON like the head's
    errors: ``{"code": ..., "message": ...}`` where ``body`` is already that JSON."""
    data = body.encode()
    lines = [f"HTTP/1.1 {status} {reason}\r\n", "Content-Type: application/json\r\n"]
    lines += [f"{k}: {v}\r\n" for k, v in extra]
    lines.append(f"Content-Length: {len(data)}\r\n\r\n")
    return "".join(lines).encode("latin-1") + data


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def _connection_named(headers: Headers) -> frozenset[bytes]:
    named: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            named.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return frozenset(named)


def _names_others(value: bytes) -> bool:
    """Whether a ``Connection`` header's value names a header that is not hop-by-hop anyway."""
    if value in _PLAIN_CONNECTION:
        return False
    return any(t.strip().lower() not in HOP_BY_HOP for t in value.split(b",") if t.strip())


def _is_int(value: bytes) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


def _value(headers: Headers, wanted: bytes) -> bytes:
    return next((v for n, v in headers if n.lower() == wanted), b"")

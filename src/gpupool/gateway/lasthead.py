"""Heads built once per run of identical headers: the last head of a connection, kept with what it
was built from.

The requests of one keep-alive connection mostly repeat their headers (a client library sends the
same ones each time), and so do one replica's answers. Comparing two short lists of byte pairs runs
in C in a fraction of a microsecond; building a head walks every header in Python (3-4 µs each
way, a few percent of a trivial request's whole cost). A miss costs the comparison and a copy.
"""

from __future__ import annotations

from gpupool.gateway import headers as h


class RequestHeads:
    """The header lines of the last request head sent for one client connection."""

    __slots__ = ("_fields", "_headers", "_key")

    def __init__(self) -> None:
        self._headers: list[tuple[bytes, bytes]] | None = None
        self._key: tuple[str, bytes, h.Framing, bytes, bool] | None = None
        self._fields = b""

    def head(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        *,
        client: str,
        prefix: bytes,
        framing: h.Framing,
        caller: bytes,
        upgrade: bool,
    ) -> bytes:
        """``headers.upstream_head``, from the last one's lines when the inputs are the same."""
        key = (client, prefix, framing, caller, upgrade)
        if headers != self._headers or key != self._key:
            self._fields = h.upstream_fields(
                headers, client=client, prefix=prefix, framing=framing, caller=caller, upgrade=upgrade
            )
            self._headers, self._key = list(headers), key  # a copy: trailers may still be added
        return b"".join((method, b" ", target, b" HTTP/1.1\r\n", self._fields))


class ResponseHeads:
    """The last answer head a replica's connection passed on, and its framing for the client."""

    __slots__ = ("_headers", "_key", "_value")

    def __init__(self) -> None:
        self._headers: list[tuple[bytes, bytes]] | None = None
        self._key: tuple[int, bytes, bool, bool, bool] | None = None
        self._value = (b"", h.Framing.NONE)

    def head(
        self,
        status: int,
        reason: bytes,
        headers: list[tuple[bytes, bytes]],
        *,
        head_request: bool,
        http11: bool,
        keep_alive: bool,
    ) -> tuple[bytes, h.Framing]:
        """``headers.response_head``, the last one's result when the inputs are the same."""
        key = (status, reason, head_request, http11, keep_alive)
        if headers != self._headers or key != self._key:
            self._value = h.response_head(
                status, reason, headers, head_request=head_request, http11=http11, keep_alive=keep_alive
            )
            self._headers, self._key = list(headers), key
        return self._value

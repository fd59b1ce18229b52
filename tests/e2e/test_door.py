"""The head's door (issue 15, part 1), on a real head over raw sockets: a body is never read before
its token is checked, never past --max-body, and a client that sends its headers or body too slowly
is cut off, so a few slow or hostile clients cannot hold the head's memory or connections."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess

pytestmark = pytest.mark.e2e

MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    made = HeadProcess(
        tmp_path_factory.mktemp("door") / "data", extra=["--max-body", "64K", "--client-timeout", "1s"]
    ).start()
    yield made
    made.kill_everything()


def _connect(head: HeadProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", head.port), timeout=10)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str]]:
    """The status and JSON body of one response (read until the head closes or the body is in)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head_part, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head_part.split(b"\r\n") if line.lower().startswith(b"content-length")),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    status = int(head_part.split(b" ")[1])
    return status, json.loads(body) if body else {}


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _post_headers(head: HeadProcess, length: int | None, token: str | None) -> bytes:
    lines = [b"POST /api/v1/jobs HTTP/1.1", b"Host: 127.0.0.1", b"Content-Type: application/json"]
    lines.append(f"Content-Length: {length}".encode() if length is not None else b"Transfer-Encoding: chunked")
    if token:
        lines.append(f"Authorization: Bearer {token}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


def test_a_body_without_a_token_is_refused_before_it_is_read(head: HeadProcess) -> None:
    assert head.proc is not None
    before = _rss_kib(head.proc.pid)
    for token in (None, "gp_not-a-token"):
        with _connect(head) as sock:
            sock.sendall(_post_headers(head, 100 * 2**20, token))  # announces 100 MiB
            sent = 0
            try:  # the head answers and closes; it never reads what follows
                while sent < 8 * 2**20:
                    sock.sendall(b"x" * 65536)
                    sent += 65536
            except OSError:
                pass
            status, body = _answer(sock)
        assert status == 401 and body["code"] == "unauthorized", body
        assert ("missing token" if token is None else "invalid token") in body["message"]
    assert _rss_kib(head.proc.pid) - before < 20 * 1024, "the head held a body it had no reason to read"


def test_a_body_past_max_body_is_refused_whether_announced_or_streamed(head: HeadProcess) -> None:
    token = head.token()
    with _connect(head) as sock:  # announced: refused from the header alone
        sock.sendall(_post_headers(head, MAX_BODY + 1, token))
        status, body = _answer(sock)
    assert status == 413 and body["code"] == "body_too_large" and "--max-body" in body["message"], body
    with _connect(head) as sock:  # chunked: refused once the count passes the limit
        sock.sendall(_post_headers(head, None, token))
        chunk = b"x" * 16384
        try:
            for _ in range(MAX_BODY // len(chunk) + 2):
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        except OSError:
            pass
        status, body = _answer(sock)
    assert status == 413 and body["code"] == "body_too_large", body
    with head.client() as c:  # a body within the limit is served as ever
        job = c.submit(command=["true"], gpus=0, env={"PAD": "y" * (MAX_BODY // 2)})
        assert job["state"] == "pending"


def test_a_client_too_slow_with_its_headers_or_body_is_cut_off(head: HeadProcess) -> None:
    with _connect(head) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        started = time.monotonic()
        assert sock.recv(1024) == b"", "the head kept a half-sent request open"
        assert time.monotonic() - started < 5
    with _connect(head) as sock:
        sock.sendall(_post_headers(head, 1000, head.token()) + b'{"command": ')  # and never the rest
        status, body = _answer(sock)
    assert status == 408 and body["code"] == "body_timeout", body
    with _connect(head) as sock:  # a connection kept alive waits for its next request as long
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _answer(sock)[0] == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        assert sock.recv(1024) == b""

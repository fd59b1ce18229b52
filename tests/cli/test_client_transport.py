"""The client's two transports (httpx, and the standard library's for plain http) send the same
requests and read the same answers: each call is made through both against one recording server
and the two recordings and results are compared."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from gpupool.client import transport as plain
from gpupool.client.http import ClientError, GpupoolClient, HeadUnreachable
from gpupool.domain.errors import InvalidInput

SENT_HEADERS = ("authorization", "idempotency-key", "content-type", "content-length")


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(
            {
                "method": self.command,
                "target": self.path,
                "headers": {h: self.headers.get(h) for h in SENT_HEADERS},
                "body": body,
            }
        )
        if "/api/v1/jobs/404" in self.path:
            self._reply(404, b'{"code": "not_found", "message": "no job 404:\\n  list jobs"}', "application/json")
        elif "/api/v1/jobs/500" in self.path:
            self._reply(500, b"Internal Server Error", "text/plain")
        elif "/api/v1/jobs/7/logs" in self.path:
            self._reply(200, b"hello\n", "text/plain", {"X-Gpupool-Next-Offset": "6", "X-Gpupool-Finished": "1"})
        else:
            answer = {"id": 7, "echo": json.loads(body) if body else None, "path": self.path}
            self._reply(200, json.dumps([answer] if "jobs?" in self.path else answer).encode(), "application/json")

    def _reply(self, status: int, body: bytes, kind: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-total-count", "12")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/prefix"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _calls(c: GpupoolClient) -> list[Any]:
    out: list[Any] = []
    out.append(c.submit(command=["python", "t.py", "é"], gpus=0.5, env={"A": "1"}, idempotency_key="k-1"))
    out.append(c.jobs_page(include_finished=True, limit=5, user="ann b&c"))
    out.append(c.job(3))
    out.append(c.cancel(3))
    out.append(c.set_project("p", 1.0, None, 2.0, everyone=False))
    out.append(c.tokens())
    c.delete_user("bob")
    out.append(c.members("bad name é"))  # what a path may not hold is percent-encoded alike
    out.append(c.logs(7, worker=1, offset=0))
    for path_id in (404, 500):
        with pytest.raises(ClientError) as caught:
            c.job(path_id)
        out.append((caught.value.status, caught.value.code, caught.value.message))
    return out


def _record(url: str, monkeypatch: pytest.MonkeyPatch, *, use_plain: bool) -> tuple[list[Any], list[Any]]:
    monkeypatch.setattr(plain, "usable", lambda _url, _env: use_plain)
    _Handler.seen = []
    with GpupoolClient(url, "tok-1") as c:
        assert isinstance(c._http, plain.PlainHTTP) is use_plain
        results = _calls(c)
    return results, _Handler.seen


def test_both_transports_send_and_read_the_same(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    by_httpx = _record(server, monkeypatch, use_plain=False)
    by_plain = _record(server, monkeypatch, use_plain=True)
    assert by_plain == by_httpx
    results, seen = by_plain
    assert seen[0]["headers"]["idempotency-key"] == "k-1" and seen[0]["headers"]["authorization"] == "Bearer tok-1"
    assert seen[1]["target"] == "/prefix/api/v1/jobs?all=true&limit=5&user=ann+b%26c"
    assert results[1] == ([{"id": 7, "echo": None, "path": seen[1]["target"]}], 12)
    assert results[-2] == (404, "not_found", "no job 404:\n  list jobs")
    assert results[-1] == (500, "http_error", "HTTP 500: Internal Server Error")


def test_a_submit_is_sent_again_with_its_key_when_the_connection_fails(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = plain.PlainHTTP.request
    failures = iter([ConnectionResetError("reset by peer"), None])

    def flaky(self: plain.PlainHTTP, *args: Any, **kwargs: Any) -> plain.Response:
        if (exc := next(failures)) is not None:
            raise exc
        return real(self, *args, **kwargs)

    monkeypatch.setattr(plain.PlainHTTP, "request", flaky)
    monkeypatch.setattr("gpupool.client.http.SUBMIT_RETRIES", (0.0,))
    _Handler.seen = []
    with GpupoolClient(server, "tok-1") as c:
        assert c.submit(command=["true"], idempotency_key="k-2")["id"] == 7
    assert [s["headers"]["idempotency-key"] for s in _Handler.seen] == ["k-2"]


@pytest.mark.parametrize("use_plain", [True, False])
def test_an_unreachable_head_is_one_message(use_plain: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain, "usable", lambda _url, _env: use_plain)
    with GpupoolClient("http://127.0.0.1:9", None, timeout=2) as c, pytest.raises(HeadUnreachable) as caught:
        c.health()
    assert "cannot reach the gpupool head at http://127.0.0.1:9 (" in str(caught.value)
    assert "Connection refused" in str(caught.value)


def test_which_transport() -> None:
    assert plain.usable("http://127.0.0.1:7070", {})
    assert plain.usable("http://head:7070", {"https_proxy": "http://proxy:3128", "no_proxy": "x"})
    assert not plain.usable("https://head:7070", {})
    assert not plain.usable("http://127.0.0.1:7070", {"HTTP_PROXY": "http://proxy:3128"})
    assert not plain.usable("http://127.0.0.1:7070", {"all_proxy": "socks5://proxy"})
    assert plain.usable("http://127.0.0.1:7070", {"http_proxy": ""})
    own = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True}))
    with GpupoolClient("http://testserver", None, transport=own) as c:
        assert not isinstance(c._http, plain.PlainHTTP) and c.health() == {"ok": True}


def test_a_bad_ca_bundle_is_refused_even_for_plain_http(tmp_path: Any) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(InvalidInput, match="as the CA bundle"):
        GpupoolClient("http://127.0.0.1:7070", None, ca=str(bad))


def test_a_new_idempotency_key_is_a_random_uuid() -> None:
    import uuid

    from gpupool.client.http import new_idempotency_key

    keys = {new_idempotency_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        parsed = uuid.UUID(key)
        assert (str(parsed), parsed.version, parsed.variant) == (key, 4, uuid.RFC_4122)


def _one_answer(raw: bytes) -> str:
    """A server on 127.0.0.1 that reads one request and answers ``raw``, then closes."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(raw)
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


def test_the_socket_transport_reads_a_chunked_answer() -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    answer = plain.PlainHTTP(_one_answer(raw), {}, 5.0).request("GET", "/x")
    assert (answer.status_code, answer.content, answer.headers["x-a"]) == (200, b"hello world", "1")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    ],
)
def test_a_broken_answer_is_a_transport_error(raw: bytes) -> None:
    with pytest.raises(plain.TRANSPORT_ERRORS):
        plain.PlainHTTP(_one_answer(raw), {}, 5.0).request("GET", "/x")

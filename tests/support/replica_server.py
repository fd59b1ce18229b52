"""A tiny model server for the service tests: listens on $PORT (or the variable named by
$PORT_VAR), answers /healthz with 200, /pid with its process id, /version with $VERSION,
/slow?s=X after X seconds (at most 30), and any path holding /echo with what it was sent (its
path, headers and process id, as JSON: what a replica behind the gateway sees)."""

from __future__ import annotations

import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a model server's would be

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/slow":
            time.sleep(min(30.0, float(parse_qs(parts.query).get("s", ["1"])[0])))
            return self._answer(200, f"slow {os.getpid()}")
        if "/echo" in parts.path:
            seen = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "pid": os.getpid()}
            return self._answer(200, json.dumps(seen))
        answers = {"/healthz": "ok", "/pid": str(os.getpid()), "/version": os.environ.get("VERSION", "1")}
        body = answers.get(parts.path)
        self._answer(200 if body is not None else 404, body or "not found")

    def _answer(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    port = int(os.environ[os.environ.get("PORT_VAR", "PORT")])
    ThreadingHTTPServer.daemon_threads = True
    # Its node's address, which the gateway dials (127.0.0.1 on the local backend's nodes).
    ThreadingHTTPServer((os.environ.get("GPUPOOL_NODE_ADDRESS", "127.0.0.1"), port), Handler).serve_forever()

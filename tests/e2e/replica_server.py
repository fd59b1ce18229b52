"""A tiny model server for the service tests: listens on $PORT (or the variable named by
$PORT_VAR), answers /healthz with 200, /pid with its process id and /version with $VERSION."""

from __future__ import annotations

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        answers = {"/healthz": "ok", "/pid": str(os.getpid()), "/version": os.environ.get("VERSION", "1")}
        body = answers.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write((body or "not found").encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    port = int(os.environ[os.environ.get("PORT_VAR", "PORT")])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()

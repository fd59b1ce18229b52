"""An example inference server for `gpupool serve`: a small real model on CPU behind HTTP.

The model is a torch MLP classifier (64 features -> 2 x 512 hidden -> 10 classes) trained at start,
in about a second, on a seeded synthetic data set (ten Gaussian clusters in 64 dimensions): no file
is read and nothing is downloaded, and every start with the same --seed learns the same weights.
It is small enough to train quickly and wide enough that one request's work (a batch of rows
through three matrix products) takes milliseconds and spreads over the cores torch is given.

Why it exists: it is the knob of issue 17 made visible. A replica started with ``--cpus C`` gets
``OMP_NUM_THREADS=C`` and C pinned cores; torch's intra-op pool follows it (``torch.set_num_threads``),
so one request uses C cores. The server answers requests concurrently (one thread each), so the
service's ``--max-concurrency`` decides how many requests share those cores at once: more raises
throughput until the cores are busy, then only lengthens each request (benchmarks/serve_curve.py).

Routes (port from $PORT, or the variable --port-env names):

- ``GET /healthz``: 200 and ``{"status", "threads", "omp_num_threads", "accuracy", ...}``
- ``POST /predict`` with ``{"inputs": [[64 numbers], ...]}`` (at most 4096 rows): ``{"classes", "scores"}``
- ``GET /predict?rows=N``: the first N rows of the held-out set (default 256), for load generators:
  ``{"rows", "classes", "accuracy"}``

    PORT=8000 python examples/inference/server.py [--seed 0] [--port-env PORT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import torch
from torch import nn

FEATURES, CLASSES, HIDDEN = 64, 10, 512
MAX_ROWS = 4096
DEFAULT_ROWS = 256
STEPS = 30  # enough for ~97% held-out accuracy; each step is a 250-row batch


class Model:
    """The trained classifier and its held-out set; ``predict`` is safe from many threads (no
    gradients, the weights are only read)."""

    def __init__(self, seed: int) -> None:
        started = time.monotonic()
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        centres = torch.randn(CLASSES, FEATURES, generator=gen) * 1.5
        train_x, train_y = _sample(centres, 4000, gen)
        self.test_x, self.test_y = _sample(centres, MAX_ROWS, gen)
        self.net = nn.Sequential(
            nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)
        )
        optimiser = torch.optim.Adam(self.net.parameters(), lr=3e-3)
        for step in range(STEPS):
            batch = slice((step * 250) % 4000, (step * 250) % 4000 + 250)
            loss = nn.functional.cross_entropy(self.net(train_x[batch]), train_y[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        self.net.eval()
        self.accuracy = self.score(self.test_x, self.test_y)
        self.train_s = time.monotonic() - started

    def predict(self, x: torch.Tensor) -> tuple[list[int], list[list[float]]]:
        with torch.inference_mode():
            probs = torch.softmax(self.net(x), dim=1)
        return probs.argmax(dim=1).tolist(), probs.tolist()

    def score(self, x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.inference_mode():
            return float((self.net(x).argmax(dim=1) == y).float().mean())


def _sample(centres: torch.Tensor, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, CLASSES, (n,), generator=gen)
    return centres[labels] + torch.randn(n, FEATURES, generator=gen) * 3.0, labels


class Handler(BaseHTTPRequestHandler):
    model: Model
    info: dict[str, Any]
    protocol_version = "HTTP/1.1"  # keep-alive: the gateway reuses its connections to a replica
    # The head and the body leave in two writes; with Nagle's algorithm on, the body would wait for
    # the peer's delayed ACK of the head (~40 ms on Linux) on every kept-alive connection.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._send(200, self.info)
        elif url.path == "/predict":
            try:
                rows = int(parse_qs(url.query).get("rows", [str(DEFAULT_ROWS)])[0])
            except ValueError:
                rows = -1
            if not 1 <= rows <= MAX_ROWS:
                self._send(400, {"error": f"rows must be 1 to {MAX_ROWS}"})
                return
            classes, _ = self.model.predict(self.model.test_x[:rows])
            hits = sum(int(c == int(y)) for c, y in zip(classes, self.model.test_y[:rows], strict=True))
            self._send(200, {"rows": rows, "classes": classes[:16], "accuracy": round(hits / rows, 4)})
        else:
            self._send(404, {"error": f"no route {url.path}: try /predict or /healthz"})

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/predict":
            self._send(404, {"error": "POST /predict only"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            if not 0 < length <= 16 * 1024 * 1024:
                raise ValueError("a JSON body of at most 16 MiB is needed")
            inputs = json.loads(self.rfile.read(length))["inputs"]
            x = torch.tensor(inputs, dtype=torch.float32)
            if x.dim() != 2 or x.shape[1] != FEATURES or not 1 <= x.shape[0] <= MAX_ROWS:
                raise ValueError(f"inputs must be 1 to {MAX_ROWS} rows of {FEATURES} numbers")
        except (ValueError, KeyError, TypeError) as e:
            self._send(400, {"error": str(e)})
            return
        classes, scores = self.model.predict(x)
        self._send(200, {"classes": classes, "scores": [[round(p, 5) for p in row] for row in scores]})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if not self.close_connection:  # HTTP/1.0 clients (ab -k) keep the connection only when told
            self.send_header("Connection", "keep-alive")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request would be most of a replica's log


def threads_from_env() -> int | None:
    """OMP_NUM_THREADS as gpupool sets it for ``--cpus C``; None where unset or not a count."""
    raw = os.environ.get("OMP_NUM_THREADS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="example inference server (a torch MLP on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port-env", default="PORT", help="the variable that holds the port")
    p.add_argument("--host", default="127.0.0.1")
    a = p.parse_args(argv)
    try:
        port = int(os.environ[a.port_env])
    except (KeyError, ValueError):
        print(f"error: ${a.port_env} must hold the port to listen on", file=sys.stderr)
        return 2
    threads = threads_from_env()
    if threads is not None:
        torch.set_num_threads(threads)  # torch reads it too; explicit so /healthz states what holds
    torch.set_num_interop_threads(1)
    model = Model(a.seed)
    Handler.model = model
    Handler.info = {
        "status": "ok",
        "model": f"mlp {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}",
        "threads": torch.get_num_threads(),
        "omp_num_threads": threads,
        "accuracy": round(model.accuracy, 4),
        "train_s": round(model.train_s, 2),
        "pid": os.getpid(),
    }
    server = ThreadingHTTPServer((a.host, port), Handler)
    server.daemon_threads = True
    print(f"serving {Handler.info['model']} on {a.host}:{port}: {json.dumps(Handler.info)}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

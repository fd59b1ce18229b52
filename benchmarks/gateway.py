"""Gateway overhead: added latency and the most requests a second, side by side with a direct
connection to one replica and with Debian's nginx as a reverse proxy over the same replicas.

Everything listens on 127.0.0.1. Two replicas (this file with ``--replica PORT``: a trivial
handler on asyncio protocols and httptools, answering ``ok``) stand behind: nginx (``worker_
processes 1``, an upstream block with ``keepalive``, ``proxy_http_version 1.1``) and the gateway
(``python -m gpupool.gateway --routes``, one process: one core, like nginx's one worker), once on
uvloop and once on asyncio's own loop. For each target:

- latency: one client, one keep-alive connection, requests one after another for --latency-s
  seconds (a blocking socket client, so the client's cost is the same for every target): p50 and
  p99; the added latency is a proxy's figure less the direct one;
- throughput: ``ab -k -c CONC -t --load-s`` (Debian's apache2-utils): requests a second;
- CPU per request: the proxy's own CPU time (user and system, its worker processes included, from
  ``/proc``) during the throughput run, divided by the requests ab completed. On a shared 2-core
  machine requests a second move with whatever else runs; a proxy's CPU per request moves far
  less, and it is what "throughput per core" means: 1e6 / (µs per request) is what one core
  could carry.

nginx is installed with apt-get when it is missing (root only). Figures are noisy on a shared
machine: compare figures from one run.

    .venv/bin/python benchmarks/gateway.py [--latency-s 3] [--load-s 6] [--concurrency 32] [--json]

Fixed rates (``--rates 500,1000``): instead of the above, an open-loop client (``_rates.py``)
sends each rate for ``--rate-s`` seconds, on a schedule, to the replica directly and through the
gateway (one process, and ``--processes`` more, e.g. ``--processes 1,2``): p50 and p99 of each,
the added latency (gateway less direct, at each percentile) and the gateway's CPU per request.
The targets take turns at each rate, so that a change in the machine's load touches all of them.

    .venv/bin/python benchmarks/gateway.py --rates 500,1000 [--rate-s 5] [--processes 1,2] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _head import machine, machine_line, percentile
from _rates import fixed_rate

ROOT = Path(__file__).resolve().parents[1]
REQUEST = b"GET /bench/ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replica", type=int, help=argparse.SUPPRESS)  # run as a replica on this port
    p.add_argument("--latency-s", type=float, default=3.0)
    p.add_argument("--load-s", type=float, default=6.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--json", action="store_true")
    p.add_argument("--uvloop-only", action="store_true", help="leave out the gateway on asyncio's own loop")
    p.add_argument("--rates", help="fixed rates (requests a second, e.g. 500,1000): open-loop latency only")
    p.add_argument("--rate-s", type=float, default=5.0, help="seconds at each rate (after a second of warm-up)")
    p.add_argument("--processes", default="1", help="gateway processes to measure at fixed rates, e.g. 1,2")
    a = p.parse_args(argv)
    if a.replica is not None:
        return _replica(a.replica)
    if a.rates:
        try:
            rates = [float(r) for r in a.rates.split(",")]
            processes = [int(n) for n in a.processes.split(",")]
        except ValueError:
            print("benchmark: --rates and --processes take numbers separated by commas", file=sys.stderr)
            return 2
        return _fixed_rates(rates, processes, a.rate_s, a.json)
    if shutil.which("ab") is None:
        print("benchmark: ab missing: apt-get install apache2-utils", file=sys.stderr)
        return 2
    nginx = _nginx_binary()
    results: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        ports = [_free_port(), _free_port()]
        for port in ports:
            stack.enter_context(_process([sys.executable, __file__, "--replica", str(port)], port))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gw-bench-")))
        targets: dict[str, tuple[int, int | None]] = {"direct": (ports[0], None)}
        targets["nginx"] = stack.enter_context(_nginx(nginx, tmp, ports))
        targets["gateway-uvloop"] = stack.enter_context(_gateway(tmp, ports, "uvloop"))
        if not a.uvloop_only:
            targets["gateway-asyncio"] = stack.enter_context(_gateway(tmp, ports, "asyncio"))
        for name, (port, pid) in targets.items():
            path = "/ping" if name == "direct" else "/bench/ping"
            try:
                lat = _latency(port, path, a.latency_s)
                before = _cpu_s(pid)
                rps, done = _throughput(port, path, a.load_s, a.concurrency)
                cpu = (_cpu_s(pid) - before) / done * 1e6 if pid is not None and done else float("nan")
            except (OSError, RuntimeError) as e:
                raise SystemExit(f"benchmark: {name}: {e!r}") from None
            results[name] = {**lat, "rps": rps, "cpu_us": cpu}
    info = {**machine(), "loadavg": os.getloadavg()}
    if a.json:
        print(json.dumps({"machine": info, "concurrency": a.concurrency, "results": results}, indent=2))
    else:
        _print(results, info, a.concurrency)
    return 0


def _print(results: dict[str, dict[str, float]], info: dict[str, object], conc: int) -> None:
    direct, nginx = results["direct"], results["nginx"]
    load = info["loadavg"]
    assert isinstance(load, tuple)
    print(f"{machine_line(info)}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    head = f"{'target':<16} {'p50 µs':>8} {'p99 µs':>8} {'+p50 µs':>8} {'+p99 µs':>8} {'req/s':>9} {'vs nginx':>9}"
    print(f"{head} {'CPU µs/req':>11} {'per core':>9}")
    for name, r in results.items():
        added50 = r["p50_us"] - direct["p50_us"]
        added99 = r["p99_us"] - direct["p99_us"]
        ratio = r["rps"] / nginx["rps"] if nginx["rps"] else float("nan")
        per_core = 1e6 / r["cpu_us"] if r["cpu_us"] == r["cpu_us"] and r["cpu_us"] else float("nan")
        print(
            f"{name:<16} {r['p50_us']:>8.0f} {r['p99_us']:>8.0f} {added50:>8.0f} {added99:>8.0f}"
            f" {r['rps']:>9.0f} {ratio:>9.2f} {r['cpu_us']:>11.1f} {per_core:>9.0f}"
        )
    print(f"latency: one connection, sequential requests; req/s: ab -k -c {conc}; +: added to direct;")
    print("CPU µs/req: the proxy's own CPU per request under ab; per core: 1e6 / that, req/s one core carries")


def _fixed_rates(rates: list[float], processes: list[int], seconds: float, as_json: bool) -> int:
    rows: list[dict[str, object]] = []
    with contextlib.ExitStack() as stack:
        ports = [_free_port(), _free_port()]
        for port in ports:
            stack.enter_context(_process([sys.executable, __file__, "--replica", str(port)], port))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gw-bench-")))
        targets: dict[str, tuple[int, int | None]] = {"direct": (ports[0], None)}
        for n in processes:
            targets[f"gateway x{n}"] = stack.enter_context(_gateway(tmp, ports, "uvloop", n))
        for rate in rates:
            direct: dict[str, float] = {}
            for name, (port, pid) in targets.items():
                request = REQUEST.replace(b"/bench/ping", b"/ping") if name == "direct" else REQUEST
                before = _cpu_s(pid)
                try:
                    r = fixed_rate(port, request, rate, seconds)
                except (OSError, RuntimeError) as e:
                    raise SystemExit(f"benchmark: {name} at {rate:.0f}/s: {e}") from None
                r["cpu_us"] = (_cpu_s(pid) - before) / (r["n"] + rate) * 1e6 if pid is not None else float("nan")
                direct = direct or r
                r["added_p50_us"] = r["p50_us"] - direct["p50_us"]
                r["added_p99_us"] = r["p99_us"] - direct["p99_us"]
                rows.append({"target": name, "rate": rate, **r})
    info = {**machine(), "loadavg": os.getloadavg()}
    if as_json:
        print(json.dumps({"machine": info, "seconds": seconds, "results": rows}, indent=2))
        return 0
    load = info["loadavg"]
    assert isinstance(load, tuple)
    print(f"{machine_line(info)}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"{'target':<12} {'rate/s':>7} {'p50 µs':>8} {'p99 µs':>8} {'max µs':>8} {'+p50 µs':>8} {'+p99 µs':>8}"
        f" {'CPU µs/req':>11} {'late':>5}"
    )
    for row in rows:
        print(
            f"{row['target']:<12} {row['rate']:>7.0f} {row['p50_us']:>8.0f} {row['p99_us']:>8.0f} {row['max_us']:>8.0f}"
            f" {row['added_p50_us']:>8.0f} {row['added_p99_us']:>8.0f} {row['cpu_us']:>11.1f} {row['late']:>5}"
        )
    print(f"open loop: requests on a fixed schedule for {seconds:g}s at each rate; +: added to direct at that")
    print("percentile; CPU µs/req: the gateway's own (its processes'), warm-up included; late: sends >2 ms behind")
    return 0


def _latency(port: int, path: str, seconds: float) -> dict[str, float]:
    request = REQUEST.replace(b"/bench/ping", path.encode())
    samples: list[float] = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(200):  # warm up
            _one(sock, request)
        end = time.perf_counter() + seconds
        while (start := time.perf_counter()) < end:
            _one(sock, request)
            samples.append(time.perf_counter() - start)
    return {
        "n": len(samples),
        "p50_us": percentile(samples, 50) * 1e6,
        "p99_us": percentile(samples, 99) * 1e6,
    }


def _one(sock: socket.socket, request: bytes) -> None:
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += _recv(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    match = re.search(rb"(?i)content-length:\s*(\d+)", head)
    if not head.startswith(b"HTTP/1.1 200") or match is None:
        raise RuntimeError(f"unexpected answer: {head[:200]!r}")
    while len(body) < int(match.group(1)):
        body += _recv(sock)


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise RuntimeError("connection closed")
    return data


def _throughput(port: int, path: str, seconds: float, conc: int) -> tuple[float, int]:
    """Requests a second, and how many requests completed."""
    command = ["ab", "-k", "-q", "-c", str(conc), "-t", str(seconds), "-n", "50000000"]
    out = subprocess.run(
        [*command, f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, timeout=seconds + 30
    )
    failed = re.search(r"Failed requests:\s+(\d+)", out.stdout)
    non2xx = re.search(r"Non-2xx responses:\s+(\d+)", out.stdout)
    if failed is None or int(failed.group(1)) or non2xx:
        raise RuntimeError(f"ab on port {port}: {out.stdout[-600:]} {out.stderr[-300:]}")
    match = re.search(r"Requests per second:\s+([\d.]+)", out.stdout)
    done = re.search(r"Complete requests:\s+(\d+)", out.stdout)
    assert match is not None and done is not None
    return float(match.group(1)), int(done.group(1))


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) of ``pid`` and its children now (nginx's master and worker)."""
    if pid is None:
        return 0.0
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


@contextlib.contextmanager
def _nginx(binary: str, tmp: Path, ports: list[int]) -> Iterator[tuple[int, int]]:
    port = _free_port()
    servers = "\n".join(f"    server 127.0.0.1:{p};" for p in ports)
    conf = tmp / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 100000000;  # the default (1000) closes the latency client's connection
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  upstream replicas {{
{servers}
    keepalive 64;
    keepalive_requests 100000000;
  }}
  server {{
    listen 127.0.0.1:{port};
    location /bench/ {{
      proxy_pass http://replicas/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_buffering off;
    }}
  }}
}}
""")
    with _process([binary, "-c", str(conf), "-p", str(tmp)], port) as pid:
        yield port, pid


@contextlib.contextmanager
def _gateway(tmp: Path, ports: list[int], loop: str, processes: int = 1) -> Iterator[tuple[int, int]]:
    routes = tmp / "routes.json"
    endpoints = [{"replica": f"r{i}", "host": "127.0.0.1", "port": p} for i, p in enumerate(ports)]
    table = {"name": "bench", "kind": "service", "project": "bench", "public": True, "max_concurrency": 1000}
    table |= {"queue_limit": 1000, "timeout_s": 30, "endpoints": endpoints}
    routes.write_text(json.dumps({"routes": [table]}))
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "gpupool.gateway", "--routes", str(routes), "--port", str(port), "--loop", loop]
    command += ["--processes", str(processes)] if processes > 1 else []
    with _process(command, port, env) as pid:
        yield port, pid


@contextlib.contextmanager
def _process(command: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[int]:
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode()[-500:] if proc.stderr else ""
                raise RuntimeError(f"{command[0]} did not start listening on {port}: {err}")
            time.sleep(0.05)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _nginx_binary() -> str:
    """Debian's nginx, installed when missing (as benchmarks/slurm/cluster.py installs Slurm)."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("benchmark: nginx missing and not root: apt-get install nginx-light")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for package in ("nginx-light", "nginx"):
        install = ["apt-get", "install", "-y", "--no-install-recommends", package]
        if subprocess.run(install, env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, check=True)
            if subprocess.run(install, env=env, check=False).returncode != 0:
                continue
        if Path("/usr/sbin/nginx").exists():
            return "/usr/sbin/nginx"
    raise SystemExit("benchmark: could not install nginx")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _replica(port: int) -> int:
    """A trivial replica: ``ok`` to every request, keep-alive for HTTP/1.1 and HTTP/1.0 clients."""
    import asyncio

    import httptools

    class Replica(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_complete(self) -> None:
            keep = self.parser.should_keep_alive()
            extra = b"" if self.parser.get_http_version() == "1.1" else b"Connection: keep-alive\r\n"
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n" + extra + b"\r\nok"
            )  # type: ignore[attr-defined]
            if not keep:
                self.transport.close()

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Replica, "127.0.0.1", port, backlog=1024)
        await server.serve_forever()

    try:
        import uvloop

        uvloop.run(serve())
    except ImportError:
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m gpupool.gateway``: the gateway process. Options, the admin token, the loops.

The admin token (to read the route table and send load reports) comes from a file only its owner
may read (``--token-file``), or from ``GPUPOOL_GATEWAY_TOKEN``, which is taken out of the
environment at once so that nothing this process starts could inherit it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import ssl
import stat
import sys
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.resources import parse_bytes
from gpupool.domain.signins import LIMIT as SIGN_IN_LIMIT
from gpupool.gateway import observe, workers
from gpupool.gateway.access import Access
from gpupool.gateway.connection import ClientConnection
from gpupool.gateway.door import Door
from gpupool.gateway.exchange import Limits
from gpupool.gateway.gather import Gathered
from gpupool.gateway.pool import Table
from gpupool.gateway.routes import FileRoutes, HeadRoutes, RouteSource, RouteTableError
from gpupool.gateway.server import Gateway

TOKEN_ENV = "GPUPOOL_GATEWAY_TOKEN"
DEFAULT_PORT = 7071
log = logging.getLogger("gpupool.gateway")


class UsageError(ValueError):
    """Bad options: one line, exit code 2."""


@dataclass(frozen=True)
class Options:
    host: str
    port: int
    head: str | None
    token: str | None
    routes: Path | None
    poll_s: float
    report_s: float
    auth_ttl_s: float
    max_body: int
    limits: Limits
    uvloop: bool
    parent: int | None = None
    head_ca: Path | None = None
    door: Door = field(default_factory=Door)
    tls: tuple[Path, Path] | None = None  # certificate and key: served over HTTPS
    sign_in_limit: int = SIGN_IN_LIMIT
    processes: int = 1  # on one port (SO_REUSEPORT), each with its share of every cap (gateway/workers.py)


def parse(argv: list[str], env: dict[str, str]) -> Options:
    p = argparse.ArgumentParser(prog="python -m gpupool.gateway", description="gpupool's gateway to services and jobs")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port (printed when ready)")
    p.add_argument("--head", help="the head's URL: the route table, load reports and token checks come from it")
    p.add_argument("--token-file", type=Path, help=f"the admin token, mode 0600 (else ${TOKEN_ENV})")
    p.add_argument("--routes", type=Path, help="a static route table (JSON) instead of the head's")
    p.add_argument("--poll", default="0.5s", help="how often the head's route table is read")
    p.add_argument("--report-every", default="1s", help="how often the load goes to the head")
    p.add_argument(
        "--auth-ttl",
        default="0.5s",
        help="how long the head's answer about a token is kept (with the head's own half second, a revoked token"
        " fails within a second)",
    )
    p.add_argument("--header-timeout", default="10s", help="the time a client has to send a request's head")
    p.add_argument("--body-timeout", default="10s", help="the time a client has to send a request's body")
    p.add_argument("--max-connections", type=int, default=1000, help="connections served at once; more get 503")
    p.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate (PEM), as the head does")
    p.add_argument("--tls-key", type=Path, help="the certificate's key (PEM)")
    p.add_argument("--max-body", default="64M", help="the largest request body passed on")
    p.add_argument(
        "--sign-in-limit",
        type=int,
        default=SIGN_IN_LIMIT,
        help="failed sign-ins from one address in a burst before it gets 429, as the head's (0: no limit)",
    )
    p.add_argument("--eject", default="1s", help="how long a replica that refused a connection is left out (doubling)")
    p.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    p.add_argument("--parent", type=int, help="stop when this process (the head that started it) is gone")
    p.add_argument("--head-ca", type=Path, help="the certificate (PEM) to trust for an HTTPS head")
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="processes serving the port (SO_REUSEPORT), each with its share of every replica's cap (1..64)",
    )
    a = p.parse_args(argv)
    if (a.head is None) == (a.routes is None):
        raise UsageError("give either --head URL or --routes FILE")
    if not 0 <= a.port <= 65535:
        raise UsageError(f"--port {a.port}: must be 0..65535")
    try:
        poll, report, ttl, eject = (parse_duration(v) for v in (a.poll, a.report_every, a.auth_ttl, a.eject))
        header, body = parse_duration(a.header_timeout), parse_duration(a.body_timeout)
        max_body = parse_bytes(a.max_body)
    except InvalidInput as e:
        raise UsageError(str(e)) from None
    if not (0.05 <= poll <= 60 and 0.1 <= report <= 600 and 0 <= ttl <= 300 and 0.01 <= eject <= 300):
        raise UsageError("--poll 0.05s..60s, --report-every 0.1s..10m, --auth-ttl 0..5m, --eject 0.01s..5m")
    if not (0.1 <= header <= 300 and 0.1 <= body <= 300 and 16 <= a.max_connections <= 100_000):
        raise UsageError("--header-timeout and --body-timeout 0.1s..5m, --max-connections 16..100000")
    if not 1 <= a.processes <= workers.MAX_PROCESSES:
        raise UsageError(f"--processes {a.processes}: must be 1..{workers.MAX_PROCESSES}")
    if not 0 <= a.sign_in_limit <= 100_000:
        raise UsageError(f"--sign-in-limit {a.sign_in_limit}: must be 0..100000")
    if (a.tls_cert is None) != (a.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    token = _token(a.token_file, env) if a.head else None
    return Options(
        host=a.host,
        port=a.port,
        head=a.head.rstrip("/") if a.head else None,
        token=token,
        routes=a.routes,
        poll_s=poll,
        report_s=report,
        auth_ttl_s=ttl,
        max_body=max_body,
        limits=Limits(eject_s=eject, eject_most_s=max(eject, 10 * eject)),
        uvloop=_uvloop(a.loop),
        parent=a.parent,
        head_ca=a.head_ca,
        door=Door(header_s=header, body_s=body, max_connections=-(-a.max_connections // a.processes)),
        tls=(a.tls_cert, a.tls_key) if a.tls_cert is not None else None,
        sign_in_limit=a.sign_in_limit,
        processes=a.processes,
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per poll of the head
    try:
        options = parse(sys.argv[1:] if argv is None else argv, dict(os.environ))
    except UsageError as e:
        print(f"gateway: {e}", file=sys.stderr)
        return 2
    finally:
        os.environ.pop(TOKEN_ENV, None)
    if options.processes == 1:
        return _run(options, workers.Place())
    try:
        return workers.run_all(options.host, options.port, options.processes, lambda place: _run(options, place))
    except OSError as e:
        print(f"gateway: {e}", file=sys.stderr)
        return 2


def _run(options: Options, place: workers.Place) -> int:
    """One process of the gateway, on its event loop: its exit code."""
    try:
        if options.uvloop:
            import uvloop

            uvloop.run(serve(options, place))
        else:
            asyncio.run(serve(options, place))
    except (UsageError, RouteTableError, OSError) as e:
        print(f"gateway: {e}", file=sys.stderr)
        return 2
    return 0


async def serve(options: Options, place: workers.Place | None = None) -> None:
    """Run until SIGINT or SIGTERM (``place``: which of ``--processes`` this is, and its socket)."""
    place = place or workers.Place()
    head: httpx.AsyncClient | None = None
    source: RouteSource
    if options.head is not None:
        head = httpx.AsyncClient(
            base_url=options.head,
            headers={"Authorization": f"Bearer {options.token}"},
            timeout=5.0,
            verify=str(options.head_ca) if options.head_ca else True,
        )
        source = HeadRoutes(head)
    else:
        assert options.routes is not None
        source = FileRoutes(options.routes)
    table = Table(part=place.part)
    if options.routes is not None:
        table.apply(await source.fetch())  # a bad file stops the gateway before it serves
    access = Access(head, ttl_s=options.auth_ttl_s) if head is not None else None
    gateway = Gateway(
        table,
        access,
        lambda: observe.render(metrics),
        limits=options.limits,
        max_body=options.max_body,
        door=options.door,
        sign_in_limit=options.sign_in_limit,
    )
    metrics = observe.registry(table, gateway)
    loop = asyncio.get_running_loop()
    if place.sock is not None:
        server = await loop.create_server(lambda: ClientConnection(gateway), sock=place.sock, ssl=_tls(options.tls))
    else:
        server = await loop.create_server(
            lambda: ClientConnection(gateway),
            options.host,
            options.port,
            backlog=1024,
            reuse_address=True,
            ssl=_tls(options.tls),
        )
    port = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [loop.create_task(_poll(source, table, options.poll_s))]
    if head is not None:
        tasks.append(loop.create_task(_reports(head, table, options.report_s, place)))
    watched = options.parent if place.first is None else place.first
    if watched is not None:
        tasks.append(loop.create_task(_orphaned(watched, stop)))
    if place.children:
        tasks.append(loop.create_task(_watch(place.children)))
    # What is loaded by now lives as long as the process: frozen, the collector no longer walks it,
    # and its full collections under load take ~1 ms instead of several (as the head's, cli/up.py).
    gc.collect()
    gc.freeze()
    if place.part.index > 0:
        place.served()
    else:
        origin = f"head {options.head}" if options.head else f"file {options.routes}"
        scheme = "https" if options.tls else "http"
        more = f", {options.processes} processes" if options.processes > 1 else ""
        print(f"gpupool gateway ready at {scheme}://{options.host}:{port} (routes from {origin}{more})", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks)
        if head is not None:
            await head.aclose()


def _reports(head: httpx.AsyncClient, table: Table, every_s: float, place: workers.Place) -> Coroutine[Any, Any, None]:
    """The load reports: a forked process hands its own to the first; the first (or only) one
    posts its own with the others' merged in, so the head sees the whole gateway's load."""
    if place.report_fd is not None:
        return observe.hand_over_loop(place.report_fd, table, every_s)
    gathered = Gathered() if place.reports else None
    if gathered is not None:
        observe.read_reports(asyncio.get_running_loop(), place.reports, gathered)
    return observe.report_loop(head, table, every_s, gathered)


async def _poll(source: RouteSource, table: Table, every_s: float) -> None:
    """Keep the table current; on failure keep the last good one and say so once per new error."""
    said = ""
    while True:
        try:
            table.apply(await source.fetch())
            said = ""
        except RouteTableError as e:
            if str(e) != said:
                log.warning("gateway: keeping the last route table: %s", e)
                said = str(e)
        await asyncio.sleep(every_s)


async def _orphaned(parent: int, stop: asyncio.Event) -> None:
    """Stop once the head that started this gateway is gone (``--parent``). The head stops its
    gateway when it stops; a head killed by SIGKILL cannot, and the gateway, in a session of its
    own, gets no signal then: it finds itself adopted by another process (``getppid`` changes)."""
    while os.getppid() == parent:
        await asyncio.sleep(0.5)
    log.warning("gateway: the process that started it (pid %d) is gone; stopping", parent)
    stop.set()


async def _watch(children: list[int]) -> None:
    """Say when a forked gateway process exits before the gateway stops: the kernel gives its
    socket's connections to the others from then on, with its share of the caps left unused."""
    while children:
        await asyncio.sleep(1.0)
        for pid in workers.gone(children):
            log.warning("gateway: gateway process %d exited; the others go on serving", pid)


def _token(path: Path | None, env: dict[str, str]) -> str:
    if path is None:
        token = env.get(TOKEN_ENV, "").strip()
        if not token:
            raise UsageError(f"--head needs the admin token: --token-file FILE (mode 0600) or ${TOKEN_ENV}")
        return token
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UsageError(f"{path}: others may read it (mode {stat.S_IMODE(mode):o}); chmod 600 {path}")
        token = path.read_text().strip()
    except OSError as e:
        raise UsageError(f"cannot read the token file: {e}") from None
    if not token:
        raise UsageError(f"{path} is empty")
    return token


def _tls(pair: tuple[Path, Path] | None) -> ssl.SSLContext | None:
    if pair is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(pair[0]), str(pair[1]))
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"cannot load --tls-cert/--tls-key: {e}") from None
    return context


def _uvloop(choice: str) -> bool:
    if choice == "asyncio":
        return False
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise UsageError("--loop uvloop: uvloop is not installed") from None
        return False
    return True

"""Assemble and run the head: store, executor with its nodes, controller, API.

The only module that knows how the parts fit; each part is given what it needs.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import IO

import uvicorn

from gpupool import backends
from gpupool.api import auditing, guard
from gpupool.api.app import create_app
from gpupool.api.prometheus import SchedulerMetrics
from gpupool.backends import Topology
from gpupool.client.http import is_loopback
from gpupool.clock import SystemClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.controller.services import ReconcilerSettings, ServiceReconciler
from gpupool.domain.errors import InvalidInput, Unavailable
from gpupool.domain.power_budget import check_budget
from gpupool.domain.users import ADMIN_USER, Role
from gpupool.executors.base import Executor
from gpupool.executors.ray_processes import write_secret
from gpupool.gateway import launch as gateway_launch
from gpupool.node import accounts
from gpupool.node.private import secure_data_dir
from gpupool.scheduler import registry
from gpupool.settings import JOIN_TOKEN_FILE, TOKEN_FILE, Settings
from gpupool.store import tokens, users
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database
from gpupool.store.sealing import KEY_FILE as SEALING_KEY_FILE
from gpupool.store.sealing import Sealer
from gpupool.usecases.accounts import job_accounts
from gpupool.usecases.context import HeadContext, RayCluster
from gpupool.usecases.load import LoadBoard

log = logging.getLogger("gpupool.head")
# In the data dir, readable by the head's user only (0600), made so at start if they are not.
GATEWAY_TOKEN_FILE = "gateway-token"  # the gateway's identity for this start (0600), read by the gateway alone
PRIVATE_FILES = (
    TOKEN_FILE,
    JOIN_TOKEN_FILE,
    GATEWAY_TOKEN_FILE,
    SEALING_KEY_FILE,
    "ray/auth_token",
    "gpupool.db",
    "gpupool.db-wal",
    "gpupool.db-shm",
)


class Head:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # 0700, its secrets 0600: nothing a job (or another user) can read (docs/guide/what-a-job-sees.md).
        secure_data_dir(settings.data_dir, PRIVATE_FILES)
        self._lock = _lock_data_dir(settings)
        self.db = Database(settings.database_url)
        self.db.migrate()
        mended = [
            said
            for path, role in ((settings.token_file, "admin"), (settings.data_dir / JOIN_TOKEN_FILE, "join"))
            if (said := self._ensure_token(path, role))
        ]
        backend = backends.build(settings)  # the table of backends, by name
        self.executor: Executor = backend.executor
        self.ray: RayCluster | None = backend.cluster
        self.topology: Topology = backend.topology
        self.notes: list[str] = [*mended, *backend.notes]
        self.gateway_secret = "gpg_" + secrets.token_urlsafe(32)  # the gateway's identity, for this start only
        self._on_stop = backend.on_stop
        registry.placement(settings.placement)  # refuse an unknown plugin now, not at the first cycle
        try:  # a power budget below one idle node's draw: refused now (issue 33)
            check_budget(settings.power_budget_w, self.executor.nodes())
        except InvalidInput:
            self.executor.close()
            raise
        clock = SystemClock()
        self.sealer = Sealer.at(settings.data_dir / SEALING_KEY_FILE)  # users' registry logins, sealed at rest
        self.metrics = SchedulerMetrics()  # what the controller observes, shown at /metrics
        self.controller = Controller(
            self.db,
            self.executor,
            clock,
            settings.scheduler_config,
            controller_settings(settings),
            on_cycle=self.metrics.observe_cycle,
            on_first_start=self.metrics.observe_first_start,
            sealer=self.sealer,
        )
        if backend.watch_exits is not None:
            backend.watch_exits(self.controller.exit_rang)
            self.controller.rings_at_exits()
        load = LoadBoard()  # the gateway's load reports, read by the autoscaler
        self.services = ServiceReconciler(
            self.db,
            clock,
            load,
            self.controller.wake,
            ReconcilerSettings(autoscale_window_s=settings.autoscale_window_s),
        )
        self._gateway: subprocess.Popen[bytes] | None = None
        self.ctx = HeadContext(
            self.db,
            clock,
            self.executor,
            self.controller.wake,
            self.ray,
            settings.idle,
            job_accounts(self.executor, settings.allow_system_accounts),
            wake_services=self._wake,
            load=load,
            scheduler=settings.scheduler_config,
            gateway_secret=self.gateway_secret,
            max_user_arrays=settings.max_user_arrays,
            sealer=self.sealer,
            power_budget_w=settings.power_budget_w,
        )
        if not self.ctx.accounts.owners:
            self.notes.append(
                f"single-user mode: every job runs as {accounts.me()}, the head's own user"
                " (run gpupool as root for jobs to run as their owners' Unix accounts)"
            )
        self.app = create_app(
            self.ctx, self.metrics, settings.max_body_bytes, settings.client_timeout_s, settings.sign_in_limit
        )

    def _wake(self) -> None:
        """A request changed a service: the service reconciler and the controller look now."""
        self.controller.wake()
        self.services.wake()

    def _ensure_token(self, path: Path, role: str) -> str | None:
        """Create the admin (or join) token at first start, again if its file was deleted, and
        again if the token in it no longer works (revoked, expired): a head never runs on with a
        file token that does not work. The database keeps only its hash. What was mended is said
        (None: nothing was)."""
        now = SystemClock().now()
        with self.db.tx() as s:
            try:
                current = path.read_text().strip()
            except OSError:
                current = ""
            if current and tokens.has_role(s, role) and tokens.principal_for(s, current, now) is not None:
                return None
            if role == Role.ADMIN.value:
                users.ensure_user(s, ADMIN_USER, Role.ADMIN, now)  # the built-in user that owns it
            token = tokens.create_token(s, role, role, now)
        write_secret(path, token + "\n")
        if not current:
            return None  # a first start, or a file deleted: nothing worth saying
        return f"the {role} token in {path} no longer worked (revoked or expired): a new one was made there"

    def summary(self) -> str:
        nodes = self.executor.nodes()
        gpus = sum(len(n.gpus) for n in nodes)
        simulated = any(g.simulated for n in nodes for g in n.gpus)
        kind = "simulated" if simulated or (self.topology.simulated and not gpus) else "real"
        if self.topology.note:
            kind = f"simulated: {self.topology.note}"
        scheme = "https" if self.settings.tls_cert else "http"
        url = f"{scheme}://{self.settings.host}:{self.settings.port}"
        line = (
            f"gpupool head ready at {url} — {len(nodes)} nodes, {gpus} GPUs ({kind}), data in {self.settings.data_dir}"
        )
        line += f"\ndashboard: {url}/ui/ (gpupool dashboard prints a signed-in link)"
        if self.ctx.accounts.owners and self.ctx.accounts.head_user == "root":
            line += (
                "\njobs run as: each user's own Unix account; the built-in admin's (this head's admin token)"
                " as root, so give people tokens of their own (gpupool user add NAME)"
            )
        if self.ctx.gateway.port is not None:
            line += (
                f"\ngateway: {scheme}://{self.settings.host}:{self.ctx.gateway.port}"
                " (services at /NAME/: gpupool serve; published job ports at /jobs/ID/: gpupool submit --expose)"
            )
        if self.executor.capabilities.node_join and self.ray is not None:
            line += (
                f"\nRay backend: Ray cluster at {self.ray.address}; other machines join with"
                f" `gpupool join {url} --token-file FILE` (FILE: a copy of {self.settings.data_dir / JOIN_TOKEN_FILE})"
            )
        if not self.settings.tls_cert and not is_loopback(self.settings.host):
            line += (
                f"\nwarning: plain HTTP on {self.settings.host}: tokens cross the network in clear text;"
                " serve HTTPS with --tls-cert and --tls-key (clients refuse plain http beyond loopback"
                " unless given --insecure)"
            )
        if self.ctx.gateway.port is not None and not is_loopback(self.settings.host) and not self.settings.tls_cert:
            line += (
                f"\nwarning: the gateway speaks plain HTTP on {self.settings.host}: callers' tokens cross the network"
                " in clear text; put it behind a TLS proxy, or keep the head on loopback"
            )
        return "\n".join([line, *self.notes])

    def _stop_backend(self) -> str:
        """Stop what the backend started (a Ray head of this data dir) unless jobs still run on it."""
        if self._on_stop is None:
            return ""
        try:
            return self._on_stop(_live_workers(self.db))
        except Exception:
            log.exception("stopping what the backend started failed")
            return ""

    def serve(self, out: IO[str] = sys.stdout) -> None:
        sock = _bind(self.settings.host, self.settings.port)
        if self.settings.port == 0:
            self.settings = _with_port(self.settings, sock.getsockname()[1])
        if self.settings.gateway:
            self._start_gateway()
        self.controller.start()
        self.services.start()
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            http=guard.header_timeout(self.settings.client_timeout_s),
            limit_concurrency=self.settings.max_connections,
            # The client's address is the socket's unless a proxy the head was told of forwarded the
            # request (uvicorn believes X-Forwarded-For from 127.0.0.1 by default: a job could forge it).
            proxy_headers=bool(self.settings.trusted_proxies),
            forwarded_allow_ips=list(self.settings.trusted_proxies) or None,
            ssl_certfile=self.settings.tls_cert,
            ssl_keyfile=self.settings.tls_key,
        )
        server = _Server(config, on_ready=lambda: self._announce(out))
        try:
            server.run(sockets=[sock])
        finally:
            auditing.close(self.app)  # the requests answered are all in the audit log
            self._stop_gateway()
            self.services.stop()
            self.controller.stop()
            self.executor.close()
            said = self._stop_backend()
            self.db.close()
            if said:
                print(said, file=out, flush=True)
            print(
                "gpupool head stopped; running jobs keep running and are re-adopted at the next start",
                file=out,
                flush=True,
            )

    def _start_gateway(self) -> None:
        """Start the gateway process (``gateway/``) and wait for its ready line: it reads the
        route table from this head with the admin token, by file (0600) as the CLI does. It must
        be up before the head says it is ready, and a port it cannot take stops the head now."""
        settings = self.settings
        if settings.gateway_port:  # a port taken is said in one line here, not by the gateway's own error
            try:
                _bind(settings.host, settings.gateway_port).close()
            except Unavailable:
                raise Unavailable(
                    f"cannot listen on {settings.host}:{settings.gateway_port} for the gateway: the port is taken;"
                    " pass another --gateway-port, or --no-gateway",
                    code="port_in_use",
                ) from None
        local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(settings.host, settings.host)
        head = f"{'https' if settings.tls_cert else 'http'}://{f'[{local}]' if ':' in local else local}"
        # The gateway's door is the API's (timeouts, connection cap); HTTPS with the head's certificate, trusted.
        extra = [
            f"--header-timeout={settings.client_timeout_s}s",
            f"--body-timeout={settings.client_timeout_s}s",
            f"--max-connections={settings.max_connections}",
            f"--sign-in-limit={settings.sign_in_limit}",  # 0 (no limit) too
            f"--processes={settings.gateway_processes}",
        ]
        if settings.tls_cert and settings.tls_key:
            extra += ["--head-ca", str(settings.tls_cert), "--tls-cert", str(settings.tls_cert)]
            extra += ["--tls-key", str(settings.tls_key)]
        identity = settings.data_dir / GATEWAY_TOKEN_FILE
        write_secret(identity, self.gateway_secret + "\n")  # this start's; the last one's no longer works
        proc = gateway_launch.start_gateway(
            settings.gateway_port, f"{head}:{settings.port}", identity, host=settings.host, extra=extra
        )
        try:
            url = gateway_launch.ready_url(proc)
        except RuntimeError as exc:
            raise Unavailable(f"{exc}: pass another --gateway-port, or --no-gateway", code="gateway_failed") from None
        self._gateway = proc
        self.ctx.gateway.port = int(url.rsplit(":", 1)[1])
        self.ctx.gateway.tls = bool(settings.tls_cert)

    def _stop_gateway(self) -> None:
        proc, self._gateway = self._gateway, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def _announce(self, out: IO[str]) -> None:
        print(self.summary(), file=out, flush=True)


class _Server(uvicorn.Server):
    """uvicorn, but SIGINT/SIGTERM only stop it (no re-raise) and readiness is announced."""

    def __init__(self, config: uvicorn.Config, on_ready: object) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and callable(self._on_ready):
            self._on_ready()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only for TCP-typed
    # listeners, and without it every response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"cannot listen on {host}:{port}: {exc.strerror}; pass another --host or --port", code="port_in_use"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def controller_settings(settings: Settings) -> ControllerSettings:
    """The controller's part of the settings (its other fields keep the controller's defaults)."""
    return ControllerSettings(
        settings.interval_s,
        settings.kill_grace_s,
        fair_share_half_life_s=settings.fair_share_half_life_s,
        telemetry_every_s=settings.telemetry_every_s,
        idle=settings.idle,
        alerts=settings.alerts,
        restart_backoff_s=settings.restart_backoff_s,
        image_wait_s=settings.image_wait_s,
        keep_finished_s=settings.keep_finished_s,
        max_user_log_bytes=settings.max_user_log_bytes,
        power_budget_w=settings.power_budget_w,
        allow_system_accounts=settings.allow_system_accounts,
        max_slowdown=settings.max_slowdown_pct / 100.0,
    )


def _with_port(settings: Settings, port: int) -> Settings:
    return replace(settings, port=port)


def _live_workers(db: Database) -> int:
    with db.read() as s:
        return len(worker_repo.live_workers(s))


def _lock_data_dir(settings: Settings) -> IO[str]:
    lock = open(settings.data_dir / "head.lock", "a+")  # noqa: SIM115 - held for the life of the head
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        owner = lock.read().strip() or "?"
        raise Unavailable(
            f"another gpupool head (pid {owner}) uses {settings.data_dir}; stop it or pass --data-dir",
            code="head_running",
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return lock

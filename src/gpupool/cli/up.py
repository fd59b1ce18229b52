"""``gpupool up``: start the head on the embedded default."""

from __future__ import annotations

import enum
import ipaddress
import logging
from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.render import bounded_duration
from gpupool.domain.arrays import DEFAULT_MAX_USER_ARRAYS
from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.resources import format_bytes, parse_bytes
from gpupool.domain.user_logs import DEFAULT_MAX_USER_LOG_BYTES
from gpupool.scheduler.config import MAX_RECLAIM_MIN_RUN_S
from gpupool.scheduler.policies import POLICIES, SIM_ONLY, for_head
from gpupool.settings import DEFAULT_GATEWAY_PORT, DEFAULT_PORT, Settings


class Backend(enum.StrEnum):
    LOCAL = "local"
    RAY = "ray"


def _node_timeout(text: str) -> float:
    return bounded_duration("--node-timeout", text, 2, 3600)


def up(
    port: Annotated[int, typer.Option(help="API port (0: any free port)", min=0, max=65535)] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    data_dir: Annotated[
        Path | None,
        typer.Option(help="state, logs and the admin token [default: $GPUPOOL_DATA_DIR or $XDG_DATA_HOME/gpupool]"),
    ] = None,
    db: Annotated[str | None, typer.Option(help="SQLAlchemy URL [default: SQLite in the data dir]")] = None,
    fake_nodes: Annotated[int | None, typer.Option(help="simulate this many nodes")] = None,
    fake_gpus: Annotated[int | None, typer.Option(help="simulated GPUs per node")] = None,
    fake_gpu_model: Annotated[str | None, typer.Option(help="model name of the simulated GPUs")] = None,
    fake_hardware: Annotated[
        Path | None, typer.Option(help="simulate the nodes and GPUs a JSON file describes")
    ] = None,
    kill_grace: Annotated[float, typer.Option(help="seconds between SIGTERM and SIGKILL", min=0)] = 10.0,
    fair_share_half_life: Annotated[
        str, typer.Option(help="how long past usage counts for fair share: its weight halves every this long")
    ] = "1d",
    placement: Annotated[
        str, typer.Option(help="placement plugin: frag (fragmentation-aware), binpack, spread or topology")
    ] = "frag",
    policy: Annotated[
        str, typer.Option(help=f"scheduling policy: {', '.join(n for n in POLICIES if n not in SIM_ONLY)}")
    ] = "default",
    partition: Annotated[
        str | None,
        typer.Option(
            help="fifo-isolated confines a project to: nodes (its own, sized by its quota; the default) or gpus"
        ),
    ] = None,
    interval: Annotated[float, typer.Option(help="seconds between controller cycles", min=0.01, max=60)] = 0.5,
    reclaim_min_run: Annotated[
        str,
        typer.Option(help="a job that borrowed beyond its quota runs this long before reclaim stops it (0 to 1d)"),
    ] = "0s",
    backend: Annotated[
        Backend, typer.Option(help="local: virtual nodes on this machine; ray: every node of a Ray cluster")
    ] = Backend.LOCAL,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Ray backend: join this Ray cluster (token from RAY_AUTH_TOKEN_PATH) instead of starting one"
        ),
    ] = None,
    node_name: Annotated[
        str | None, typer.Option(help="Ray backend: this machine's node name [default: hostname]")
    ] = None,
    node_timeout: Annotated[
        str, typer.Option(help="Ray backend: a node silent this long is declared down and its jobs requeued")
    ] = "10s",
    telemetry_every: Annotated[str, typer.Option(help="read every GPU this often (1s to 5m)")] = "5s",
    idle_threshold: Annotated[
        float, typer.Option(help="an allocated GPU below this utilisation (%) counts towards idle", min=0, max=100)
    ] = 5.0,
    idle_after: Annotated[
        str, typer.Option(help="an allocated GPU below the idle threshold this long is reported idle")
    ] = "10m",
    alert_temperature: Annotated[
        float, typer.Option(help="raise an alert when a GPU reaches this temperature (°C)", min=30, max=150)
    ] = 85.0,
    cgroups: Annotated[
        bool,
        typer.Option(
            "--cgroups/--no-cgroups",
            help="each worker in a cgroup of its own where the node can make them (root, a cgroup fs);"
            " --no-cgroups keeps only per-process limits (gpupool nodes says so)",
        ),
    ] = True,
    allow_system_accounts: Annotated[
        bool,
        typer.Option(
            "--allow-system-accounts",
            help="let users' jobs run as root or an account below UID_MIN (refused by default, at mapping,"
            " submit and launch); the built-in admin's jobs run as the head's account either way",
        ),
    ] = False,
    restart_backoff: Annotated[
        str,
        typer.Option(
            help="a job that failed waits this long before its next attempt, doubling with each failure up to"
            " 10m (0 to 10m; 0: at once)"
        ),
    ] = "10s",
    keep_finished: Annotated[
        str,
        typer.Option(
            help="finished jobs, with their events, run directories and logs, are deleted after this long (1h to 10y)"
        ),
    ] = "30d",
    max_log_size: Annotated[
        str, typer.Option(help="a worker's log past this keeps its newest half (1M to 1T)")
    ] = "100M",
    max_user_arrays: Annotated[
        int,
        typer.Option(
            help="arrays with an unfinished task one user may have; another array is refused (409 too_many_arrays)"
            " until one finishes (1 to 100000)",
            min=1,
            max=100_000,
        ),
    ] = DEFAULT_MAX_USER_ARRAYS,
    max_user_logs: Annotated[
        str,
        typer.Option(
            help="each user's logs together, on every node; past it the logs of their oldest finished jobs are"
            " emptied first, said in those jobs' events (1M to 1T)"
        ),
    ] = format_bytes(DEFAULT_MAX_USER_LOG_BYTES),
    max_body: Annotated[str, typer.Option(help="the largest request body the API reads (1K to 64M)")] = "1M",
    client_timeout: Annotated[
        str, typer.Option(help="how long a client may take to send a request's headers, and then its body (1s to 5m)")
    ] = "10s",
    tls_cert: Annotated[
        Path | None, typer.Option(help="serve HTTPS with this certificate (PEM; with --tls-key)")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="the certificate's private key (PEM)")] = None,
    max_connections: Annotated[
        int, typer.Option(help="connections served at once; more get 503 (16 to 100000)", min=16, max=100_000)
    ] = 1000,
    sign_in_limit: Annotated[
        int,
        typer.Option(
            help="failed sign-ins from one address, each within 10s of the last, before it gets 429 until it is"
            " quiet for 10s (0: no limit)",
            min=0,
            max=100_000,
        ),
    ] = 20,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            help="a reverse proxy in front of the API (an address or network, repeatable) whose X-Forwarded-For"
            " the audit log believes; none by default: the client's address is the socket's",
        ),
    ] = None,
    gateway_port: Annotated[
        int,
        typer.Option(
            help="port of the gateway to services (/NAME/) and jobs' published ports (/jobs/ID/), a process the"
            " head starts and stops (0: any free port)",
            min=0,
            max=65535,
        ),
    ] = DEFAULT_GATEWAY_PORT,
    gateway: Annotated[
        bool, typer.Option("--gateway/--no-gateway", help="--no-gateway: start none (services then have no URL)")
    ] = True,
    autoscale_window: Annotated[
        str, typer.Option(help="the span of recent load the autoscaler averages over (1s to 10m)")
    ] = "30s",
) -> None:
    """Start the head: API, controller and executor (local virtual nodes, or a Ray cluster) in one process."""
    for_head(policy, partition=partition)  # an unknown or simulator-only name is refused before anything starts
    if gateway and gateway_port and gateway_port == port:
        raise InvalidInput(f"--gateway-port {gateway_port} is the API's --port: give the gateway another one")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_environ(
        data_dir,
        host=host,
        port=port,
        db_url=db,
        fake_nodes=fake_nodes,
        fake_gpus=fake_gpus,
        fake_gpu_model=fake_gpu_model,
        fake_hardware=fake_hardware,
        kill_grace_s=kill_grace,
        interval_s=interval,
        placement=placement,
        policy=policy,
        partition=partition,
        reclaim_min_run_s=bounded_duration("--reclaim-min-run", reclaim_min_run, 0, MAX_RECLAIM_MIN_RUN_S),
        fair_share_half_life_s=parse_duration(fair_share_half_life),
        backend=backend.value,
        ray_address=ray_address,
        node_name=node_name,
        node_timeout_s=_node_timeout(node_timeout),
        telemetry_every_s=bounded_duration("--telemetry-every", telemetry_every, 1, 300),
        idle_threshold_pct=idle_threshold,
        idle_after_s=bounded_duration("--idle-after", idle_after, 10, 7 * 86400),
        alert_temperature_c=alert_temperature,
        cgroups=cgroups,
        allow_system_accounts=allow_system_accounts,
        restart_backoff_s=bounded_duration("--restart-backoff", restart_backoff, 0, 600),
        keep_finished_s=bounded_duration("--keep-finished", keep_finished, 3600, 3650 * 86400),
        max_log_bytes=_size("--max-log-size", max_log_size, 2**20, 2**40),
        max_user_arrays=max_user_arrays,
        max_user_log_bytes=_size("--max-user-logs", max_user_logs, 2**20, 2**40),
        max_body_bytes=_body_size(max_body),
        max_connections=max_connections,
        trusted_proxies=_networks("--trusted-proxy", trusted_proxy or []),
        sign_in_limit=sign_in_limit,
        tls_cert=_readable("--tls-cert", tls_cert, tls_key),
        tls_key=_readable("--tls-key", tls_key, tls_cert),
        header_timeout_s=bounded_duration("--client-timeout", client_timeout, 1, 300),
        body_timeout_s=bounded_duration("--client-timeout", client_timeout, 1, 300),
        gateway_port=gateway_port if gateway else None,
        autoscale_window_s=bounded_duration("--autoscale-window", autoscale_window, 1, 600),
    )
    # The server stack loads only for `up`, keeping other commands quick, and only once the options
    # above are read: a malformed one is refused in half a second, not after two of imports.
    from gpupool.head import Head

    Head(settings).serve()


def _readable(flag: str, path: Path | None, other: Path | None) -> Path | None:
    """A TLS file: both --tls-cert and --tls-key, or neither; readable now, not at the first client."""
    if (path is None) != (other is None):
        raise InvalidInput("--tls-cert and --tls-key go together: give both to serve HTTPS")
    if path is None:
        return None
    try:
        path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {flag} {path}: {exc.strerror}") from None
    return path.resolve()


def _networks(flag: str, given: list[str]) -> tuple[str, ...]:
    """Addresses or networks (``10.0.0.5``, ``10.0.0.0/24``, ``::1``), each checked."""
    out = []
    for text in given:
        try:
            out.append(str(ipaddress.ip_network(text.strip(), strict=False)))
        except ValueError:
            raise InvalidInput(
                f"{flag} must be an IP address or network (10.0.0.5, 10.0.0.0/24), not {text!r}"
            ) from None
    if len(out) > 64:
        raise InvalidInput(f"{flag}: at most 64, got {len(out)}")
    return tuple(out)


def _body_size(text: str) -> int:
    return _size("--max-body", text, 1024, 64 * 2**20)


def _size(flag: str, text: str, low: int, high: int) -> int:
    try:
        size = parse_bytes(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{flag}: {exc}") from None
    if not low <= size <= high:
        raise InvalidInput(f"{flag} must be between {low} and {high} bytes, got {text}")
    return size

"""Service commands: `gpupool serve NAME -- CMD`, `gpupool services`, `gpupool service show|scale|delete`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from gpupool.cli.common import Output, client, console, env_pairs, print_json
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.cli.render import ago, parse_time
from gpupool.cli.service_load import load_line, replica_table
from gpupool.cli.tables import Col, Listing
from gpupool.domain.audit import printable
from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.services import ServiceSpec

service_app = typer.Typer(help="Show, scale or delete an inference service.", no_args_is_help=True)


def serve(
    name: Annotated[str, typer.Argument(help="the service's name: lower-case letters, digits and '-'")],
    command: Annotated[list[str] | None, typer.Argument(help="the server's command, after --")] = None,
    project: Annotated[str | None, typer.Option(help="project (queue) to charge")] = None,
    replicas: Annotated[int | None, typer.Option(help="a fixed number of replicas (0 to 64)")] = None,
    min_replicas: Annotated[int | None, typer.Option(help="with --max-replicas: the autoscaler's floor")] = None,
    max_replicas: Annotated[int | None, typer.Option(help="the autoscaler's ceiling")] = None,
    gpus: Annotated[float, typer.Option(help="GPUs per replica: 0, a fraction below 1, or whole")] = 1.0,
    cpus: Annotated[
        str, typer.Option(help="CPU cores per replica: whole ones are pinned (2); a fraction (0.5, 500m) shares")
    ] = "0",
    memory: Annotated[str | None, typer.Option(help="memory per replica, e.g. 8G")] = None,
    env: Annotated[list[str] | None, typer.Option(help="K=V, repeatable")] = None,
    max_concurrency: Annotated[int, typer.Option(help="requests one replica is sent at once")] = 16,
    target_concurrency: Annotated[
        int | None, typer.Option(help="requests per replica the autoscaler aims at [default: max concurrency]")
    ] = None,
    health: Annotated[
        str, typer.Option(help="health path: a replica is ready once GET on it answers 2xx")
    ] = "/healthz",
    port_env: Annotated[str, typer.Option(help="the variable each replica is told its port in")] = "PORT",
    public: Annotated[bool, typer.Option(help="the gateway serves it without a token")] = False,
    scale_to_zero: Annotated[bool, typer.Option(help="with --min-replicas 0: no replica while idle")] = False,
    scale_down_delay: Annotated[str, typer.Option(help="quiet this long before scaling down, e.g. 1m")] = "60s",
    queue_limit: Annotated[
        int, typer.Option(help="requests the gateway queues when every replica is at its cap; then 429")
    ] = 100,
    timeout: Annotated[
        str, typer.Option(help="the gateway's limit on a request's wait for an answer, queue included, e.g. 60s")
    ] = "60s",
    ready_timeout: Annotated[str, typer.Option(help="say why a replica is not ready after this long")] = "2m",
    image: Annotated[
        str | None,
        typer.Option(
            help="an OCI image the replicas run in, as gpupool submit --image; the command may then be left out"
        ),
    ] = None,
    gpu_power: Annotated[
        str | None, typer.Option("--gpu-power", help="the replicas' GPU power mode, as gpupool submit --gpu-power")
    ] = None,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Create or update a service; an update that changes the replicas rolls them one at a time."""
    if not command and image is None:
        raise InvalidInput(
            "empty command: give the server's command after --, e.g. gpupool serve web -- python serve.py"
        )
    env_map = env_pairs(env)
    body: dict[str, Any] = {
        "name": name,
        "command": list(command or []),
        "project": project,
        "replicas": replicas,
        "min_replicas": min_replicas,
        "max_replicas": max_replicas,
        "gpus": gpus,
        "cpus": cpus,
        "memory": memory,
        "env": env_map,
        "workdir": str(Path.cwd()),
        "max_concurrency": max_concurrency,
        "target_concurrency": target_concurrency,
        "health_path": health,
        "port_env": port_env,
        "public": public,
        "scale_to_zero": scale_to_zero,
        "scale_down_delay_s": parse_duration(scale_down_delay),
        "queue_limit": queue_limit,
        "timeout_s": parse_duration(timeout),
        "ready_timeout_s": parse_duration(ready_timeout),
        **({"image": image} if image is not None else {}),
        **({"gpu_power": gpu_power} if gpu_power is not None else {}),
    }
    ServiceSpec.create(**body)  # refused here, before anything is sent
    with client(url) as c:
        made = c.serve(body)
    if output is Output.JSON:
        print_json(made)
        return
    console.print(
        f"service {made['name']} ({made['project']}): {_counts(made)}; see it with gpupool service show {name}"
    )


# The URL is what people copy: it never wraps or gets cut; at narrow widths owner, concurrency,
# age, project and state (the replica counts say most of it) go first.
SERVICE_COLUMNS = (
    Col("NAME"),
    Col("PROJECT", drop=2),
    Col("OWNER", drop=4),
    Col("STATE", drop=1),
    Col("REPLICAS", wrap=True),
    Col("CONCURRENCY", justify="right", drop=5),
    Col("URL"),
    Col("AGE", justify="right", drop=3),
)


def services(url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """Every service with its replica counts."""
    with client(url) as c:
        listing = c.services()
    if output is Output.JSON:
        print_json(listing)
        return
    console.print(services_table(listing))


def services_table(listing: list[dict[str, Any]]) -> Listing:
    table = Listing(SERVICE_COLUMNS)
    for s in listing:
        table.add_row(
            s["name"],
            s["project"],
            s["owner"],
            s["state"],
            _counts(s),
            str(s["max_concurrency"]),
            s["url"] or "- (no gateway)",
            ago(s["created_at"]),
        )
    return table


@service_app.command("show")
def show(name: str, url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """One service: its settings, its load, and each replica (its job, node, port, readiness, and
    the gateway's figures: requests a second, in flight, queued, latency p50/p99, errors)."""
    with client(url) as c:
        s = c.service(name)
    if output is Output.JSON:
        print_json(s)
        return
    # Text, never markup: a command or a log line is shown as it is, on a terminal or in a file.
    title = Text.assemble((s["name"], "bold"), f" ({s['project']}, {s['owner']}): {s['state']}, {_counts(s)}")
    console.print(title)
    where = s["url"] or "- (the head runs no gateway)"
    console.print(Text(f"url {where}  health {s['health_path']}  port in ${s['port_env']}  "))
    console.print(Text(f"replicas {s['min_replicas']}..{s['max_replicas']}, max concurrency {s['max_concurrency']}"))
    if s["command"] is not None:
        console.print(Text("command " + " ".join(s["command"])))
    crash = s.get("crash_loop")
    if crash is not None:
        console.print(Text(crash_line(crash), style="red"))
        for line in crash["log_tail"]:
            console.print(Text("  " + (printable(line, 1000, backslash=False) or "")))
    console.print(load_line(s))
    console.print(replica_table(s))


def crash_line(crash: dict[str, Any]) -> str:
    """What a crash-looping service's show says of the replica that keeps failing."""
    how = f"exit {crash['exit_code']}" + (f" ({crash['exit_reason']})" if crash["exit_reason"] else "")
    when = f", tried again at {parse_time(crash['next_try_at']):%H:%M:%S} UTC" if crash["next_try_at"] else ""
    ends = "; its log ends:" if crash["log_tail"] else ""
    return f"crash loop: replica job {crash['job_id']} failed {crash['restarts']} times, last {how}{when}{ends}"


@service_app.command("scale")
def scale(
    name: str,
    replicas: Annotated[int, typer.Option(help="the number of replicas (0 to 64); autoscaling stops")],
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Pin the number of replicas."""
    with client(url) as c:
        s = c.scale_service(name, replicas)
    if output is Output.JSON:
        print_json(s)
        return
    console.print(f"service {name}: {_counts(s)}")


@service_app.command("delete")
def delete(name: str, url: UrlOpt = "http://127.0.0.1:7070") -> None:
    """Delete the service; its replicas are cancelled."""
    with client(url) as c:
        c.delete_service(name)
    console.print(f"service {name} deleted; its replicas are being stopped")


def _counts(s: dict[str, Any]) -> str:
    r = s["replicas"]
    return f"{r['ready']}/{r['desired']} ready" + (f", {r['starting']} starting" if r["starting"] else "")

"""Drawing a service's load (the gateway's reports, as the head's services API gives them): the
replica table of ``gpupool service show`` and the services section of ``gpupool top``. Plain
functions of the API's JSON, so they are tested without a head."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from gpupool.cli.tables import Col, Listing

# Narrow terminals keep the replica, whether it is ready and its traffic; the endpoint, version
# and node go first.
REPLICA_COLUMNS = (
    Col("JOB", justify="right"),
    Col("STATE"),
    Col("READY"),
    Col("VERSION", drop=2),
    Col("NODE", drop=3),
    Col("ENDPOINT", drop=4),
    Col("REQ/S", justify="right"),
    Col("IN-FLIGHT", justify="right"),
    Col("QUEUED", justify="right", drop=1),
    Col("P50", justify="right"),
    Col("P99", justify="right"),
    Col("ERR/S", justify="right", drop=1),
)

SERVICE_COLUMNS = (
    Col("SERVICE", wrap=True),
    Col("PROJECT", wrap=True, drop=2),
    Col("STATE"),
    Col("REPLICAS", justify="right"),
    Col("REQ/S", justify="right"),
    Col("IN-FLIGHT", justify="right"),
    Col("QUEUED", justify="right"),
    Col("P50", justify="right"),
    Col("P99", justify="right"),
    Col("ERR/S", justify="right", drop=1),
)


def load_line(service: dict[str, Any]) -> Text:
    """One line of the service's load, or why there is none."""
    load = service.get("load")
    if load is None:
        return Text("load: no report from the gateway in the last 30 s", style="dim")
    text = Text("load ", style="bold")
    text.append(
        f"{_rate(load['requests_per_s'])} req/s, {load['in_flight']} in flight, {load['queued']} queued,"
        f" p50 {_ms(load['latency_p50_s'])}, p99 {_ms(load['latency_p99_s'])}, {_rate(load['errors_per_s'])} errors/s"
    )
    text.append(f" (over {load['window_s']:.0f} s, reported {load['age_s']:.0f} s ago)", style="dim")
    return text


def replica_table(service: dict[str, Any]) -> Listing:
    table = Listing(REPLICA_COLUMNS)
    for r in service["replica_list"]:
        endpoint = f"{r['host']}:{r['port']}" if r["host"] and r["port"] else "-"
        ready = "yes" if r["ready"] else ("stopping" if r["stopping"] else "no")
        table.add_row(
            str(r["job_id"]),
            r["state"],
            ready,
            "current" if r["current"] else "old",
            r["node"] or "-",
            endpoint,
            *_load_cells(r.get("load")),
        )
    return table


def services_table(services: list[dict[str, Any]]) -> Listing:
    table = Listing(SERVICE_COLUMNS)
    for s in services:
        r = s["replicas"]
        table.add_row(s["name"], s["project"], s["state"], f"{r['ready']}/{r['desired']}", *_load_cells(s.get("load")))
    return table


def _load_cells(load: dict[str, Any] | None) -> list[str]:
    if load is None:
        return ["-"] * 6
    return [
        _rate(load["requests_per_s"]),
        str(load["in_flight"]),
        str(load["queued"]),
        _ms(load["latency_p50_s"]),
        _ms(load["latency_p99_s"]),
        _rate(load["errors_per_s"]),
    ]


def _rate(per_s: float) -> str:
    return f"{per_s:.1f}" if per_s < 100 else f"{per_s:.0f}"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1000
    return f"{ms:.1f}ms" if ms < 10 else f"{ms:.0f}ms"

"""`gpupool report`: GPU-hours allocated and used, energy and queue times per project, user or job.

``render_table`` and ``to_csv`` turn the head's answer (``GET /api/v1/report``) into output, so
both are testable without a head."""

from __future__ import annotations

import csv
import enum
import io
from datetime import UTC
from typing import Annotated, Any

import typer

from gpupool.cli.common import DEFAULT_URL, client, console, print_json
from gpupool.cli.opts import UrlOpt
from gpupool.cli.render import parse_time
from gpupool.cli.tables import Col, Listing

COLUMNS = [
    "key",
    "gpu_hours",
    "used_gpu_hours",
    "coverage",
    "energy_kwh",
    "queue_count",
    "queue_mean_s",
    "queue_p50_s",
    "queue_p95_s",
    "queue_max_s",
    "avg_power_w",
    "kwh_per_gpu_hour",
    "energy_saved_kwh",
]


class ReportOutput(enum.StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


class By(enum.StrEnum):
    PROJECT = "project"
    USER = "user"
    JOB = "job"


def report(
    since: Annotated[str | None, typer.Option(help="ISO 8601 time or a duration ago (7d); default 7 days ago")] = None,
    until: Annotated[str | None, typer.Option(help="ISO 8601 time or a duration ago; default now")] = None,
    by: Annotated[By, typer.Option("--by", help="group by project, user or job")] = By.PROJECT,
    url: UrlOpt = DEFAULT_URL,
    output: Annotated[ReportOutput, typer.Option("-o", "--output", help="table, json or csv")] = ReportOutput.TABLE,
) -> None:
    """GPU-hours allocated and used (utilisation-weighted; coverage: the part of the allocated hours
    with utilisation readings), energy in kWh, a GPU's mean draw and kWh per GPU-hour, the energy
    power modes saved against max (estimated from each model's power curve) and queue times
    (started - submitted) per group."""
    with client(url) as c:
        data = c.report(since=since, until=until, by=by.value)
    if output is ReportOutput.JSON:
        print_json(data)
    elif output is ReportOutput.CSV:
        print(to_csv(data), end="")
    else:
        console.print(render_table(data))


def to_csv(data: dict[str, Any]) -> str:
    """One header row (``group`` first, the grouping's name in the title), then a row per group."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([data["by"], *COLUMNS[1:]])
    for g in data["groups"]:
        writer.writerow(["" if g[c] is None else g[c] for c in COLUMNS])
    return out.getvalue()


# At a narrow width the power figures go first (energy per GPU-hour, then the saving, then the
# mean draw), then the queue's percentiles (its mean and max stay), then coverage.
REPORT_COLUMNS = (
    Col("GPU-h", justify="right"),
    Col("used GPU-h", justify="right"),
    Col("coverage", justify="right", drop=1),
    Col("kWh", justify="right"),
    Col("avg W", justify="right", drop=4),
    Col("kWh/GPU-h", justify="right", drop=6),
    Col("saved kWh", justify="right", drop=5),
    Col("jobs started", justify="right"),
    Col("queue mean", justify="right"),
    Col("p50", justify="right", drop=3),
    Col("p95", justify="right", drop=2),
    Col("max", justify="right"),
)


def render_table(data: dict[str, Any]) -> Listing:
    """A row per group; the group's name (a project, a user, a job) never wraps."""
    title = f"GPU accounting {_minute(data['since'])} → {_minute(data['until'])} UTC"
    table = Listing((Col(data["by"]), *REPORT_COLUMNS), title=title)
    for g in data["groups"]:
        cov = "-" if g["coverage"] is None else f"{g['coverage']:.0%}"
        table.add_row(
            g["key"],
            f"{g['gpu_hours']:.2f}",
            f"{g['used_gpu_hours']:.2f}",
            cov,
            f"{g['energy_kwh']:.3f}",
            "-" if g.get("avg_power_w") is None else f"{g['avg_power_w']:.0f}",
            "-" if g.get("kwh_per_gpu_hour") is None else f"{g['kwh_per_gpu_hour']:.3f}",
            f"{g.get('energy_saved_kwh') or 0.0:.3f}",
            str(g["queue_count"]),
            *(_secs(g[k]) for k in ("queue_mean_s", "queue_p50_s", "queue_p95_s", "queue_max_s")),
        )
    return table


def _minute(iso: str) -> str:
    """``2026-03-07 00:00``: the title fits 80 columns (seconds and the offset did not)."""
    return f"{parse_time(iso).astimezone(UTC):%Y-%m-%d %H:%M}"


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.0f}s"
    return f"{value / 60:.1f}m" if value < 7200 else f"{value / 3600:.1f}h"

"""Every listing the CLI prints reads at 80 columns and uses the room it has beyond (issue 19):
rendered at 80 and at 160 columns from hand-built answers, no header and no id is cut, no line is
wider than the terminal, a column left out at 80 is said so, and at 160 nothing is left out."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from gpupool.cli import alerts, arrays, audit, projects, render, report, services, simulate, top, users
from gpupool.cli.tables import Col, Listing

NOW = datetime.now(UTC)
AGO = (NOW - timedelta(hours=3)).isoformat()
LATER = (NOW + timedelta(days=30)).isoformat()
NODE = "gpu-node-017.cluster.local"  # a realistic host name, longer than any header
PROJECT = "computer-vision"


def job(job_id: int, state: str, **over: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "array_id": None,
        "name": "resnet50-imagenet-sweep",
        "project": PROJECT,
        "owner": "alice",
        "state": state,
        "gpus": 4,
        "workers": 2,
        "placements": [{"worker": 0, "node": NODE, "gpus": [0, 1, 2, 3]}],
        "reason": None,
        "reason_code": None,
        "exit_code": None,
        "submitted_at": AGO,
        **over,
    }


WAITING = "needs 2 workers × 4 GPUs; the nodes that are up hold 1 even when idle; it waits for node-2 (drained)"
JOBS = [
    job(1041, "running"),
    job(1042, "pending", placements=[], reason=WAITING, reason_code="unsatisfiable"),
    job(1043, "failed", exit_code=137),
]
ARRAY = {
    "id": 2000,
    "name": "hyperparameter-search",
    "project": PROJECT,
    "counts": {"pending": 900, "running": 80, "succeeded": 20},
    "job": job(2000, "pending", workers=1, gpus=1),
    "tasks": 1000,
    "max_running": 80,
}


def gpu(index: int, jobs: list[int], model: str = "NVIDIA H100 80GB HBM3") -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "model": model,
        "memory_mib": 81920,
        "simulated": False,
        "healthy": index != 7,
        "disabled": False,
        "jobs": jobs,
    }


NODES = [
    {
        "name": NODE,
        "state": "up",
        "gpus": [gpu(i, [1041] if i < 4 else []) for i in range(8)],
        "gpus_free": 3,
        "gpus_total": 8,
        "simulated": False,
        "cpus": 128,
        "memory_mib": 2_097_152,
        "drain_requested": False,
    },
    {
        "name": "node-2",
        "state": "down",
        "gpus": [gpu(i, []) for i in range(8)],
        "gpus_free": 0,
        "gpus_total": 8,
        "simulated": False,
        "cpus": 128,
        "memory_mib": 2_097_152,
        "drain_requested": True,
    },
]
PROJECTS = [
    {
        "name": PROJECT,
        "quota": 16,
        "limit": 64,
        "weight": 2,
        "fair_share": 21.3,
        "allocated": 24,
        "borrowed": 8,
        "recent_usage": 19.7,
        "pending": 128,
        "pending_jobs": 32,
        "idle_timeout_s": 1800,
        "users": [
            {"user": "alice.smith", "allocated": 16, "recent_usage": 12.5, "pending": 8, "pending_jobs": 2},
        ],
    }
]
USERS = [
    {
        "name": "alice.smith",
        "role": "member",
        "unix_user": "asmith",
        "projects": [PROJECT, "speech-recognition", "robotics"],
        "created_at": AGO,
        "disabled": False,
    }
]
TOKENS = [
    {
        "id": 314,
        "name": "ci-pipeline-nightly",
        "user": "alice.smith",
        "scope": "jobs:read jobs:write",
        "created_at": AGO,
        "expires_at": LATER,
        "last_used_at": AGO,
    }
]
REPORT = {
    "by": "project",
    "since": "2026-03-07T00:00:00+00:00",
    "until": "2026-03-14T00:00:00+00:00",
    "groups": [
        {
            "key": PROJECT,
            "gpu_hours": 12345.67,
            "used_gpu_hours": 9876.54,
            "coverage": 0.97,
            "energy_kwh": 4321.123,
            "queue_count": 12345,
            "queue_mean_s": 4000.0,
            "queue_p50_s": 300.0,
            "queue_p95_s": 20000.0,
            "queue_max_s": 90000.0,
        }
    ],
}
ALERTS = [
    {
        "kind": "gpu_temperature",
        "node": NODE,
        "gpu": 3,
        "job_id": 1041,
        "raised_at": AGO,
        "cleared_at": None,
        "message": f"GPU 3 of {NODE} is at 91°C, above the 85°C threshold",
    }
]
IDLE = [
    {
        "node": NODE,
        "gpu": 5,
        "job_id": 1041,
        "job_name": "jupyter-notebook",
        "owner": "alice.smith",
        "project": PROJECT,
        "priority": "interactive",
        "idle_for_s": 5400.0,
        "utilization_pct": 0.4,
    }
]
AUDIT = [
    {
        "at": AGO,
        "user": "alice.smith",
        "token_id": 314,
        "action": "job.cancel",
        "target": "job 1041",
        "result": "ok",
        "status": 200,
        "client": "203.0.113.77",
    }
]
EVENTS = [{"time": AGO, "kind": "placed", "message": f"worker 0 on {NODE} GPUs 0,1,2,3"}]
TOP = top.snapshot(
    NODES,
    [{"id": 1041, "name": "resnet50-imagenet-sweep", "owner": "alice.smith", "usage": []}],
    [
        {
            "node": NODE,
            "gpu": i,
            "time": NOW.isoformat(),
            "utilization_pct": 87.0,
            "memory_used_mib": 70000,
            "memory_total_mib": 81920,
            "temperature_c": 71.0,
            "power_w": 612.0,
        }
        for i in range(8)
    ],
    NOW,
)


GATEWAY_URL = "http://gpu-head.example.org:7071/llama-70b-chat/"
SERVICES = [
    {
        "name": "llama-70b-chat",
        "project": PROJECT,
        "owner": "alice.smith",
        "state": "ready",
        "replicas": {"desired": 4, "ready": 3, "starting": 1},
        "max_concurrency": 16,
        "url": GATEWAY_URL,
        "created_at": NOW.isoformat(),
    },
    {
        "name": "embed",
        "project": "default",
        "owner": "bob",
        "state": "starting",
        "replicas": {"desired": 1, "ready": 0, "starting": 1},
        "max_concurrency": 64,
        "url": None,
        "created_at": NOW.isoformat(),
    },
]


@dataclass
class Case:
    name: str
    make: Callable[[], Any]
    ids: tuple[str, ...]  # what must appear whole


CASES = [
    Case("jobs", lambda: render.jobs_table(JOBS), ("1041", "1042", "1043", PROJECT)),
    Case("jobs with an array", lambda: render.rows_table(arrays.table_rows(JOBS, [ARRAY])), ("2000_*", "1041")),
    Case("nodes", lambda: render.nodes_table(NODES), (NODE, "node-2")),
    Case("events", lambda: render.events_table(EVENTS), ("placed",)),
    Case("projects", lambda: projects.projects_table(PROJECTS), (PROJECT,)),
    Case("project users", lambda: projects.users_table(PROJECTS), (PROJECT, "alice.smith")),
    Case("users", lambda: users.users_table(USERS), ("alice.smith", "asmith")),
    Case("tokens", lambda: users.tokens_table(TOKENS), ("314", "alice.smith")),
    Case("report", lambda: report.render_table(REPORT), (PROJECT,)),
    Case("alerts", lambda: alerts.alerts_table(ALERTS), (NODE, "gpu_temperature", "1041")),
    Case("idle", lambda: alerts.idle_table(IDLE), (NODE, "1041", "alice.smith")),
    Case("audit", lambda: audit.audit_table(AUDIT), ("alice.smith", "job.cancel")),
    Case("top", lambda: top.gpu_table(TOP["nodes"]), (NODE, "1041")),
    Case("services", lambda: services.services_table(SERVICES), ("llama-70b-chat", GATEWAY_URL)),
    Case("simulate", lambda: simulate._table("philly: 2 nodes", {"default": {"jobs": 10}, "fifo": {"jobs": 9}}), ()),
]


def rendered(table: Any, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None, markup=False)
    console.print(table)
    return console.export_text().splitlines()


def headers(table: Any) -> list[str]:
    return [c.header for c in table.columns]


@pytest.mark.parametrize("width", [80, 160])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_listing_reads_at_the_width_it_has(case: Case, width: int) -> None:
    table = case.make()
    lines = rendered(table, width)
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    text = "\n".join(lines)
    head = next(line for line in lines if line.lstrip().startswith(headers(table)[0]))
    # The note under the table may itself wrap at the width (many columns left out).
    left_out = re.search(r"\(not shown at \d+ columns: (.*?);\s+-o\s+json\s+has\s+them\)", text, re.S)
    dropped = " ".join(left_out.group(1).split()).split(", ") if left_out else []
    for header in headers(table):
        assert header in dropped or re.search(rf"(^|\s){re.escape(header)}(\s|$)", head), (header, text)
    for ident in case.ids:
        assert re.search(rf"(^|\s){re.escape(ident)}(\s|$)", text), (ident, text)
    if width == 160:
        assert not dropped, text


def test_the_jobs_table_uses_the_room_beyond_80_columns() -> None:
    narrow, wide = rendered(render.jobs_table(JOBS), 80), rendered(render.jobs_table(JOBS), 200)
    assert len(wide) == 1 + len(JOBS)  # one line a job: nothing wraps
    assert len(narrow) > len(wide)  # the reason wraps at 80 ...
    assert WAITING in wide[2]  # ... and reads on one line when there is room


def test_columns_go_in_their_order_and_the_rest_stay() -> None:
    table = Listing(
        [Col("ID"), Col("A" * 30, drop=1), Col("B" * 30, drop=2), Col("C" * 30)],
        [("1", "a", "b", "c")],
    )
    assert table.layout(200) == [0, 1, 2, 3]
    assert table.layout(80) == [0, 1, 3]  # B goes first
    assert table.layout(40) == [0, 3]
    assert table.layout(10) == [0, 3]  # never the ones without a drop

"""`gpupool top`'s snapshot and rendering on hand-built listings, without a head."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from gpupool.cli.top import memory_text, snapshot, top_view, util_bar

NOW = datetime(2026, 3, 14, 16, 0, 0, tzinfo=UTC)


def gpu(index: int, jobs: list[int], model: str = "Simulated-H100") -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "model": model,
        "memory_mib": 81920,
        "simulated": True,
        "healthy": True,
        "disabled": False,
        "jobs": jobs,
    }


def sample(node: str, index: int, util: float, used: int, power: float) -> dict[str, Any]:
    return {
        "node": node,
        "gpu": index,
        "time": "2026-03-14T15:59:58+00:00",
        "utilization_pct": util,
        "memory_used_mib": used,
        "memory_total_mib": 81920,
        "temperature_c": 30 + util / 2,
        "power_w": power,
    }


NODES = [
    {"name": "node-1", "state": "up", "simulated": True, "gpus": [gpu(0, [7]), gpu(1, []), gpu(2, [])]},
    {"name": "node-2", "state": "down", "simulated": True, "gpus": [gpu(0, [9], model="A100")]},
]
JOBS = [
    {
        "id": 7,
        "name": "train",
        "owner": "alice",
        "usage": [  # two workers' cgroups; the second's CPU not measured yet
            {"worker": 0, "memory_mib": 2048, "memory_peak_mib": 3000, "cpu_pct": 95.0, "at": NOW.isoformat()},
            {"worker": 1, "memory_mib": 1024, "memory_peak_mib": 1024, "cpu_pct": None, "at": NOW.isoformat()},
        ],
    }
]
SAMPLES = [
    {**sample("node-1", 0, 50.0, 40960, 400.0), "power_limit_w": 700.0},  # a probe that reads the limit
    sample("node-1", 1, 0.0, 0, 70.0),
    sample("node-2", 0, 90.0, 1024, 600.0),  # the node is down: its last reading is stale
]


def render(snap: dict[str, Any]) -> list[str]:
    console = Console(width=160, record=True, color_system=None)
    console.print(top_view(snap))
    return console.export_text().splitlines()


def test_a_bar_of_50_percent_is_half_full() -> None:
    assert util_bar(50.0).plain == "█████░░░░░  50%"
    assert util_bar(0.0).plain == "░░░░░░░░░░   0%"
    assert util_bar(100.0).plain == "██████████ 100%"
    assert util_bar(120.0).plain == util_bar(100.0).plain and util_bar(-3.0).plain == util_bar(0.0).plain
    assert util_bar(52.4).plain == "█████░░░░░  52%" and util_bar(57.0).plain.startswith("██████░░░░")
    assert util_bar(None).plain == "-"
    assert memory_text(40960, 81920) == "40.0/80.0G" and memory_text(None, 81920) == "-/80.0G"


def test_snapshot_joins_jobs_and_readings_and_sums_up() -> None:
    snap = snapshot(NODES, JOBS, SAMPLES, NOW)
    assert snap["time"] == NOW.isoformat()
    assert snap["totals"] == {
        "nodes": 2,
        "nodes_up": 1,
        "gpus": 4,
        "gpus_allocated": 2,
        "gpus_idle": 0,
        "gpus_sampled": 2,
        "mean_utilization_pct": 25.0,
        "power_w": 470.0,
    }
    first, second, third = snap["nodes"][0]["gpus"]
    assert first["jobs"] == [{"id": 7, "name": "train", "user": "alice", "memory_mib": 3072, "cpu_pct": 95.0}]
    assert (first["utilization_pct"], first["memory_used_mib"], first["sampled_at"]) == (
        50.0,
        40960,
        SAMPLES[0]["time"],
    )
    assert second["jobs"] == [] and second["utilization_pct"] == 0.0
    assert first["power_limit_w"] == 700.0 and second["power_limit_w"] is None
    assert third["utilization_pct"] is None and third["sampled_at"] is None and third["memory_total_mib"] == 81920
    (down,) = snap["nodes"][1]["gpus"]
    assert down["utilization_pct"] is None and down["power_w"] is None  # stale: not shown as current
    assert down["jobs"] == [
        {"id": 9, "name": None, "user": None, "memory_mib": None, "cpu_pct": None}
    ]  # not in the jobs listing any more


def test_the_view_has_a_header_and_a_row_per_gpu() -> None:
    header, columns, *rows = render(snapshot(NODES, JOBS, SAMPLES, NOW))
    assert header.startswith("gpupool top · 2 nodes (1 up) · 4 GPUs (simulated) · 2 allocated")
    assert "mean utilisation 25% · power 470 W" in header
    assert columns.split() == [
        "NODE",
        "GPU",
        "MODEL",
        "UTIL",
        "MEMORY",
        "TEMP",
        "POWER",
        "LIMIT",
        "JOB",
        "USER",
        "NAME",
        "USE",
    ]
    assert len(rows) == 4
    busy, idle, unread, down = (r.split() for r in rows)
    assert busy == [
        "node-1",
        "0",
        "Simulated-H100",
        "█████░░░░░",
        "50%",
        "40.0/80.0G",
        "55°C",
        "400W",
        "700W",
        "7",
        "alice",
        "train",
        "95%",
        "3.0G",
    ]
    assert idle == [
        "1",
        "Simulated-H100",
        "░░░░░░░░░░",
        "0%",
        "0.0/80.0G",
        "30°C",
        "70W",
        "-",
        "-",
    ]  # no limit read: a dash
    assert unread == ["2", "Simulated-H100", "-", "-/80.0G", "-", "-", "-", "-"]
    assert down == [
        "node-2",
        "(down)",
        "0",
        "A100",
        "simulated",
        "-",
        "-/80.0G",
        "-",
        "-",
        "-",
        "9",
        "?",
        "?",
        "-",
        "-",
    ]


def test_no_readings_at_all_shows_dashes_in_the_header() -> None:
    nodes = [{"name": "node-1", "state": "up", "simulated": False, "gpus": [gpu(0, [])]}]
    header, *_ = render(snapshot(nodes, [], [], NOW))
    assert "1 node · 1 GPU · 0 allocated · mean utilisation - · power -" in header


IDLE = [{"node": "node-1", "gpu": 0, "job_id": 7, "idle_for_s": 754.0}]
ALERTS = [
    {
        "kind": "node_down",
        "node": "node-2",
        "gpu": None,
        "job_id": None,
        "message": "node node-2 is down: lost; its jobs were requeued or failed",
        "raised_at": "2026-03-14T15:50:00+00:00",
    }
]


def test_idle_gpus_and_active_alerts_are_marked() -> None:
    snap = snapshot(NODES, JOBS, SAMPLES, NOW, IDLE, ALERTS)
    assert snap["totals"]["gpus_idle"] == 1 and snap["alerts"] == ALERTS
    assert [g["idle_for_s"] for g in snap["nodes"][0]["gpus"]] == [754.0, None, None]
    header, _, busy, *_, last = render(snap)
    assert "2 allocated (1 idle)" in header and "· 1 alert ·" in header
    assert busy.rstrip().endswith("train idle 12m  95% 3.0G"), busy
    assert last == "! node node-2 is down: lost; its jobs were requeued or failed"


def test_services_and_their_load_follow_the_gpus() -> None:
    load = {"requests_per_s": 12.5, "errors_per_s": 0.0, "in_flight": 3, "queued": 1}
    load |= {"latency_p50_s": 0.0175, "latency_p99_s": 0.2, "window_s": 30.0, "age_s": 1.0}
    web = {"name": "web", "project": "default", "state": "ready", "replicas": {"desired": 2, "ready": 2}, "load": load}
    idle = {**web, "name": "quiet", "state": "idle", "replicas": {"desired": 0, "ready": 0}, "load": None}
    lines = render({**snapshot(NODES, JOBS, SAMPLES, NOW), "services": [web, idle]})
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["SERVICE"])
    assert lines[at].split() == [
        "SERVICE",
        "PROJECT",
        "STATE",
        "REPLICAS",
        "REQ/S",
        "IN-FLIGHT",
        "QUEUED",
        "P50",
        "P99",
        "ERR/S",
    ]
    assert lines[at + 1].split() == ["web", "default", "ready", "2/2", "12.5", "3", "1", "18ms", "200ms", "0.0"]
    assert lines[at + 2].split() == ["quiet", "default", "idle", "0/0", "-", "-", "-", "-", "-", "-"]
    assert not any(line.split()[:1] == ["SERVICE"] for line in render(snapshot(NODES, JOBS, SAMPLES, NOW)))

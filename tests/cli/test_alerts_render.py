"""`gpupool alerts` and `gpupool idle` tables on hand-built listings: plain words, no markup leaking
through (the CLI's console prints markup literally, so styles must be Text styles)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console

from gpupool.cli.alerts import alerts_table, idle_table


def render(table: object) -> str:
    console = Console(width=200, record=True, color_system=None, markup=False)
    console.print(table)
    return console.export_text()


def test_alert_rows_say_active_or_when_cleared_without_markup() -> None:
    raised = (datetime.now(UTC) - timedelta(minutes=30)).isoformat()
    cleared = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    base = {"kind": "gpu_temperature", "node": "n1", "gpu": 2, "job_id": 7, "raised_at": raised, "message": "hot"}
    text = render(alerts_table([{**base, "cleared_at": None}, {**base, "cleared_at": cleared, "gpu": None}]))
    _, active, gone = text.strip().splitlines()
    assert active.split() == ["gpu_temperature", "n1", "2", "7", "30m", "ago", "active", "hot"]
    assert "cleared 5m ago" in gone and " - " in gone
    assert "[" not in text


def test_idle_rows_show_who_holds_the_gpu_and_for_how_long() -> None:
    row = {
        "node": "n1",
        "gpu": 0,
        "job_id": 7,
        "job_name": "notebook",
        "owner": "alice",
        "project": "lab",
        "priority": "interactive",
        "idle_for_s": 754.0,
        "utilization_pct": 0.4,
    }
    _, line = render(idle_table([row])).strip().splitlines()
    assert line.split() == ["n1", "0", "7", "notebook", "alice", "lab", "interactive", "12m", "0%"]

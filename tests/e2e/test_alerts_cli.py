"""Alerts, idle GPUs and idle timeouts through the CLI against a real head: a temperature threshold
every simulated GPU exceeds raises one alert per GPU, listed by `gpupool alerts` and counted in
/metrics; `gpupool idle` and `gpupool project set --idle-timeout` work, and bad values are one-line
errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.headproc import HeadProcess, free_port, wait_for

pytestmark = pytest.mark.e2e


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_hot_gpus_raise_alerts_listed_by_the_cli_and_counted_in_metrics(head_factory: type[HeadProcess]) -> None:
    # Simulated GPUs sit at 30 °C and more, so a 30 °C threshold makes every one of them "hot".
    head = head_factory(extra=["--alert-temperature", "30", "--telemetry-every", "1s"]).start()
    hot = wait_for(
        lambda: len(alerts := json.loads(ok(head.cli("alerts", "-o", "json")))) == 8 and alerts,
        timeout=20,
        what="an alert for each of the 8 GPUs",
    )
    assert {a["kind"] for a in hot} == {"gpu_temperature"}
    assert {(a["node"], a["gpu"]) for a in hot} == {(f"node-{n}", g) for n in (1, 2) for g in range(4)}
    assert all(a["cleared_at"] is None and a["value"] >= 30 for a in hot)
    table = ok(head.cli("alerts"))
    assert table.split("\n")[0].split() == ["KIND", "NODE", "GPU", "JOB", "RAISED", "STATE", "MESSAGE"]
    assert table.count("gpu_temperature") == 8 and "over the 30 °C threshold" in " ".join(table.split())

    metrics = httpx.get(f"{head.url}/metrics", headers={"Authorization": f"Bearer {head.token()}"}).text
    active = {
        s.labels["kind"]: s.value
        for f in text_string_to_metric_families(metrics)
        for s in f.samples
        if s.name == "gpupool_alerts_active"
    }
    assert active == {"gpu_temperature": 8.0, "gpu_xid": 0.0, "node_down": 0.0}

    assert json.loads(ok(head.cli("idle", "-o", "json"))) == []
    assert "no idle allocated GPUs" in ok(head.cli("idle"))


def test_a_project_idle_timeout_is_set_shown_and_checked(head_factory: type[HeadProcess]) -> None:
    head = head_factory().start()
    said = ok(head.cli("project", "set", "lab", "--quota", "2", "--idle-timeout", "30m"))
    assert "idle timeout 30m" in said
    (lab,) = [p for p in json.loads(ok(head.cli("projects", "-o", "json"))) if p["name"] == "lab"]
    assert lab["idle_timeout_s"] == 1800.0
    row = next(line for line in ok(head.cli("projects")).splitlines() if line.startswith("lab"))
    assert row.split()[-1] == "30m"

    too_short = head.cli("project", "set", "lab", "--idle-timeout", "30s")
    assert too_short.returncode == 2 and "idle timeout must be from 60 seconds" in too_short.stderr
    assert len(too_short.stderr.strip().splitlines()) == 1
    malformed = head.cli("project", "set", "lab", "--idle-timeout", "soon")
    assert malformed.returncode == 2 and "malformed duration 'soon'" in malformed.stderr


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--telemetry-every", "0s", "--telemetry-every must be between 1s and 5m"),
        ("--idle-after", "1s", "--idle-after must be between 10s and 7d"),
        ("--reclaim-min-run", "2d", "--reclaim-min-run must be between 0s and 1d"),
        ("--idle-threshold", "120", "--idle-threshold': Input should be less than or equal to 100"),
    ],
)
def test_bad_head_flags_are_one_line_errors(tmp_path: object, flag: str, value: str, said: str) -> None:
    cmd = [sys.executable, "-m", "gpupool.cli.main", "up", "--port", str(free_port()), flag, value]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "GPUPOOL_DATA_DIR": str(tmp_path)}
    )
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr

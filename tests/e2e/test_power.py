"""GPU power through a real head on simulated GPUs (issue 33): a job's --gpu-power is set on its
GPU when it starts and given back when it ends, a job at max waits for a power budget with reason
power while a flexible one starts capped to fit, calibration measures a curve that efficient then
follows, and bad input is one line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.headproc import HeadProcess, wait_for, wait_state

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    data = tmp_path_factory.mktemp("power")
    made = HeadProcess(data, nodes=1, gpus=2, extra=["--power-budget", "1kW", "--telemetry-every", "1"]).start()
    yield made
    made.kill_everything()


def _submit(head: HeadProcess, *args: str) -> int:
    out = head.cli("submit", "--gpus", "1", *args, "--", "sleep", "120")
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def _events(head: HeadProcess, job_id: int) -> list[str]:
    shown = json.loads(head.cli("show", str(job_id), "-o", "json").stdout)
    return [f"{e['kind']}: {e['message']}" for e in shown["events"]]


def _limits(head: HeadProcess) -> dict[int, Any]:
    """Each GPU's power limit as the node's telemetry last read it."""
    top = json.loads(head.cli("top", "-o", "json").stdout)
    return {g["index"]: g.get("power_limit_w") for g in top["nodes"][0]["gpus"]}


def test_a_mode_is_set_a_max_job_waits_for_the_budget_and_the_limit_is_given_back(head: HeadProcess) -> None:
    with head.client() as c:
        capped = _submit(head, "--gpu-power", "400W")
        wait_state(c, capped, ("running",))
        said = _events(head, capped)
        assert "power: --gpu-power 400W: a 400 W limit on its GPUs" in said, said
        assert any(e.startswith("power: GPU ") and e.endswith("400 W limit set") for e in said), said
        gpu = c.job(capped)["placements"][0]["gpus"][0]
        wait_for(lambda: _limits(head)[gpu] == 400, 20, 0.5, "the node's telemetry to read the 400 W limit")

        waiting = _submit(head)  # max: 700 W would not fit the 600 W left of 1 kW
        job = wait_for(lambda: (j := c.job(waiting))["reason_code"] == "power" and j, 20, 0.2, "reason power")
        assert "the cluster's 1 kW budget has 600 W free" in job["reason"], job
        why = head.cli("why", str(waiting))
        assert why.returncode == 0 and "[power]" in why.stdout, why

        c.cancel(capped)
        wait_state(c, capped, ("cancelled",))
        wait_state(c, waiting, ("running",))  # the watts came back
        wait_for(lambda: _limits(head)[gpu] == 700, 20, 0.5, "the GPU back at its default 700 W")
        c.cancel(waiting)
        wait_state(c, waiting, ("cancelled",))


def test_calibration_measures_a_curve_efficient_then_follows(head: HeadProcess) -> None:
    made = head.cli("node", "calibrate-power", "node-1", "--bound", "5", "-o", "json")
    assert made.returncode == 0, made.stderr
    (curve,) = json.loads(made.stdout)
    best = next(p for p in curve["points"] if p["efficient"])
    assert best["speed"] >= 0.8 and best["energy"] < 0.9, curve
    with head.client() as c:
        job = _submit(head, "--gpu-power", "efficient")
        wait_state(c, job, ("running",))
        said = _events(head, job)
        assert any("efficient:" in e and "calibration on node-1" in e for e in said), said
        c.cancel(job)
        wait_state(c, job, ("cancelled",))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--gpus", "1", "--gpu-power", "150W"), "200-700 W"),
        (("--gpus", "0", "--gpu-power", "efficient"), "--gpu-power needs GPUs"),
        (("--gpus", "1", "--gpu-power", "fast"), "is not max, efficient or a power"),
    ],
)
def test_bad_power_input_is_one_line_and_exit_2(head: HeadProcess, args: tuple[str, ...], said: str) -> None:
    out = head.cli("submit", *args, "--", "true")
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_budget_below_an_idle_node_is_refused_at_start(tmp_path: Path) -> None:
    made = HeadProcess(tmp_path / "data", nodes=1, gpus=2, extra=["--power-budget", "50W"])
    cmd = [sys.executable, "-m", "gpupool.cli.main", "up", "--port", str(made.port), *made.args]
    out = subprocess.run(cmd, env=made.env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out
    assert "idle" in out.stderr and "Traceback" not in out.stderr, out.stderr

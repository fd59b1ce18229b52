"""`gpupool top` against a real head: a running job's GPU shows busy with its id and user, the
others idle, and `-o json` carries the same snapshot for scripts."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from tests.support.headproc import HeadProcess, wait_for, wait_state

pytestmark = pytest.mark.e2e

UTIL = re.compile(r"[█░]{10}\s+(\d+)%")


def live_until_interrupted(head: HeadProcess, seconds: float) -> tuple[int, str]:
    """Run the live view on a terminal for ``seconds``, press Ctrl-C: its exit code and what it drew."""
    master, terminal = pty.openpty()
    env = {**head.env(), "COLUMNS": "120", "LINES": "40", "TERM": "xterm"}
    cmd = [sys.executable, "-m", "gpupool.cli.main", "top", "--interval", "0.3"]
    # Ctrl-C as on a terminal, even where this test runs in a background job, whose children
    # start with SIGINT ignored (a Python started so never raises KeyboardInterrupt).
    proc = subprocess.Popen(
        cmd,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(terminal)
    drawn = b""
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                drawn += os.read(master, 65536)
        proc.send_signal(signal.SIGINT)
        # Keep reading while it exits: a frame half written into a full terminal buffer would
        # otherwise block it, and it could never get to exit (the test hung so once under load).
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                drawn += os.read(master, 65536)
        code = proc.wait(timeout=1)
        while select.select([master], [], [], 0.2)[0]:
            drawn += os.read(master, 65536)
    except OSError:  # the terminal closed with the process
        code = proc.wait(timeout=10)
    finally:
        os.close(master)
        if proc.poll() is None:  # never left running past the test, to warn in a later one
            proc.kill()
            proc.wait()
    return code, drawn.decode(errors="replace")


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_top_shows_the_job_on_its_busy_gpu(head_factory: type[HeadProcess], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # a pipe: top --once uses its own wide width
    head = head_factory(nodes=2, gpus=2, extra=["--telemetry-every", "1s"]).start()  # a busy reading sooner
    with head.client() as c:
        job_id = int(c.submit(command=["sleep", "60"], name="spin", gpus=1)["id"])
        (placement,) = wait_state(c, job_id, ("running",))["placements"]
        node, (gpu,) = placement["node"], placement["gpus"]

        def busy() -> bool:
            return any(
                s["node"] == node and s["gpu"] == gpu and (s["utilization_pct"] or 0) > 0 for s in c.latest_telemetry()
            )

        wait_for(busy, timeout=15, interval=0.25, what="a sample of the job's GPU busy")  # sampled every second

    out = ok(head.cli("top", "--once"))
    header, *rest = out.splitlines()
    assert "2 nodes" in header and "4 GPUs (simulated)" in header and "1 allocated" in header
    assert re.search(r"mean utilisation \d+% · power \d+ W", header), header
    rows = [line for line in rest if re.search(r"\d+\.\d/\d+\.\dG", line)]
    assert len(rows) == 4, out
    assert rows[0].startswith("node-1") and rows[2].startswith("node-2"), out
    busy_row = rows[(1 if node == "node-2" else 0) * 2 + gpu]
    assert re.search(rf"\s{job_id}\s+admin\s+spin", busy_row), out
    assert int(UTIL.search(busy_row).group(1)) > 0, busy_row  # type: ignore[union-attr]
    idle = [r for r in rows if r is not busy_row]
    assert all(UTIL.search(r) and "░░░░░░░░░░   0%" in r and r.rstrip().endswith("-") for r in idle), out

    snap = json.loads(ok(head.cli("top", "-o", "json")))
    assert snap["totals"]["gpus"] == 4 and snap["totals"]["gpus_allocated"] == 1
    assert snap["services"] == []  # a services section, empty on this head
    assert [n["name"] for n in snap["nodes"]] == ["node-1", "node-2"]
    assert all(n["state"] == "up" and len(n["gpus"]) == 2 for n in snap["nodes"])
    by_gpu = {(n["name"], g["index"]): g for n in snap["nodes"] for g in n["gpus"]}
    mine = by_gpu.pop((node, gpu))
    assert {k: mine["jobs"][0][k] for k in ("id", "name", "user")} == {"id": job_id, "name": "spin", "user": "admin"}
    assert set(mine["jobs"][0]) == {"id", "name", "user", "memory_mib", "cpu_pct"}  # from its cgroup, where it has one
    assert mine["utilization_pct"] > 0 and mine["memory_used_mib"] > 0 and mine["power_w"] > 0
    assert mine["simulated"] is True and mine["sampled_at"] is not None
    assert all(g["jobs"] == [] and g["utilization_pct"] == 0 for g in by_gpu.values())

    code, drawn = live_until_interrupted(head, 3.0)
    assert code == 0, drawn
    assert drawn.count("gpupool top ·") >= 2 and "spin" in drawn  # redrawn every 0.3 s

"""The CLI contract: commands, flags and JSON fields that other people's scripts depend on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from tests.support.headproc import HeadProcess, wait_for, wait_state

pytestmark = pytest.mark.e2e

JOB_FIELDS = {
    "id",
    "name",
    "project",
    "state",
    "gpus",
    "workers",
    "placements",
    "reason",
    "exit_code",
    "restarts",
    "submitted_at",
    "started_at",
    "finished_at",
}


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_submit_prints_the_id_last_and_json_listings_have_the_contract_fields(head: HeadProcess) -> None:
    ok(head.cli("project", "set", "vision"))
    out = ok(
        head.cli(
            "submit", "--name", "hello", "--project", "vision", "--gpus", "2", "--", "sh", "-c", "echo hi; sleep 0.3"
        )
    )
    job_id = int(out.strip().splitlines()[-1])
    with head.client() as c:
        wait_state(c, job_id, ("succeeded",))
    listing = json.loads(ok(head.cli("jobs", "--all", "-o", "json")))
    assert isinstance(listing, list) and len(listing) == 1
    job = listing[0]
    assert set(job) >= JOB_FIELDS
    assert (job["id"], job["name"], job["project"], job["state"], job["gpus"], job["workers"]) == (
        job_id,
        "hello",
        "vision",
        "succeeded",
        2,
        1,
    )
    assert job["exit_code"] == 0 and job["restarts"] == 0 and job["reason"] is None
    (placement,) = job["placements"]
    assert set(placement) >= {"worker", "node", "gpus"} and len(placement["gpus"]) == 2
    for key in ("submitted_at", "started_at", "finished_at"):
        assert datetime.fromisoformat(job[key]).tzinfo is not None, key
    detail = json.loads(ok(head.cli("show", str(job_id), "-o", "json")))
    assert isinstance(detail, dict) and set(detail) >= JOB_FIELDS
    assert [e["kind"] for e in detail["events"]][:4] == ["submitted", "starting", "placed", "running"]
    assert json.loads(ok(head.cli("jobs", "-o", "json"))) == []  # finished jobs only with --all


def test_nodes_json_lists_gpus_with_uuid_model_memory_and_simulated(head: HeadProcess) -> None:
    nodes = json.loads(ok(head.cli("nodes", "-o", "json")))
    assert [n["name"] for n in nodes] == ["node-1", "node-2"]
    for n in nodes:
        assert {"name", "state", "gpus", "gpus_free"} <= set(n)
        assert n["state"] == "up" and n["gpus_free"] == 4
        assert [g["index"] for g in n["gpus"]] == [0, 1, 2, 3]
        for g in n["gpus"]:
            assert {"index", "uuid", "model", "memory_mib", "simulated"} <= set(g)
            assert g["simulated"] is True and g["uuid"].startswith("GPU-")
    assert len({g["uuid"] for n in nodes for g in n["gpus"]}) == 8
    table = ok(head.cli("nodes"))
    assert "node-1" in table and "4/4" in table and "simulated" in table


def test_wait_exits_0_on_success_1_on_failure_and_1_on_timeout(head: HeadProcess) -> None:
    good = head.cli("submit", "--gpus", "0", "--", "true").stdout.split()[-1]
    bad = head.cli("submit", "--gpus", "0", "--", "sh", "-c", "exit 3").stdout.split()[-1]
    slow = head.cli("submit", "--gpus", "0", "--", "sleep", "30").stdout.split()[-1]
    assert head.cli("wait", good, "--timeout", "20").returncode == 0
    failed = head.cli("wait", bad, "--timeout", "20")
    assert failed.returncode == 1 and "exit code 3" in failed.stdout
    started = time.monotonic()
    timed_out = head.cli("wait", slow, "--timeout", "1")
    assert timed_out.returncode == 1 and "timed out" in timed_out.stderr
    assert time.monotonic() - started < 10
    head.cli("cancel", slow)


def test_logs_follow_streams_until_the_job_ends_and_worker_selects_the_log(head: HeadProcess) -> None:
    code = "import os,time\nfor i in range(5):\n    print('rank', os.environ['RANK'], 'line', i, flush=True); time.sleep(0.2)"
    job = head.cli("submit", "--gpus", "1", "--workers", "2", "--", sys.executable, "-c", code).stdout.split()[-1]
    followed = ok(head.cli("logs", job, "--follow", timeout=30))
    assert [ln for ln in followed.splitlines() if ln.startswith("rank")] == [f"rank 0 line {i}" for i in range(5)]
    second = ok(head.cli("logs", job, "--worker", "1"))
    assert "rank 1 line 4" in second and "rank 0" not in second
    bad = head.cli("logs", job, "--worker", "2")
    assert bad.returncode == 2 and "no worker 2" in bad.stderr


def test_why_explains_a_pending_job_in_words_and_json(head: HeadProcess) -> None:
    blocker = head.cli("submit", "--gpus", "4", "--workers", "2", "--", "sleep", "30").stdout.split()[-1]
    waiting = head.cli("submit", "--gpus", "3", "--", "true").stdout.split()[-1]
    with head.client() as c:
        wait_state(c, int(blocker), ("running",))
        wait_state(c, int(waiting), ("pending",))
        time.sleep(0.5)  # a cycle writes the reason
    words = ok(head.cli("why", waiting))
    assert f"job {waiting} is pending: [resources] needs 3 GPUs; 0 of 8 GPUs are free" in words
    assert "no start estimate: the jobs in its way have no --max-runtime" in words
    answer = json.loads(ok(head.cli("why", waiting, "-o", "json")))
    assert answer == {
        "id": int(waiting),
        "state": "pending",
        "reason_code": "resources",
        "reason": "needs 3 GPUs; 0 of 8 GPUs are free",
        "estimated_start": None,  # the blocker has no --max-runtime
    }
    listing = ok(head.cli("jobs"))
    assert "needs 3 GPUs" in listing
    assert "not pending" in ok(head.cli("why", blocker))
    head.cli("cancel", blocker)


def test_openapi_docs_and_healthz(head: HeadProcess) -> None:
    assert httpx.get(head.url + "/docs").status_code == 200
    paths = httpx.get(head.url + "/openapi.json").json()["paths"]
    assert {
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/why",
        "/api/v1/jobs/{job_id}/logs",
        "/api/v1/nodes",
        "/healthz",
    } <= set(paths)
    health = httpx.get(head.url + "/healthz").json()
    assert health["status"] == "ok" and health["nodes"] == 2 and health["gpus"] == 8 and health["simulated"] is True


def test_fractional_jobs_share_one_gpu(head: HeadProcess) -> None:
    ids = [head.cli("submit", "--gpus", "0.5", "--", "sleep", "3").stdout.split()[-1] for _ in range(2)]
    with head.client() as c:
        jobs = [wait_state(c, int(i), ("running",)) for i in ids]
        assert jobs[0]["placements"][0]["node"] == jobs[1]["placements"][0]["node"]
        assert jobs[0]["placements"][0]["gpus"] == jobs[1]["placements"][0]["gpus"]
        assert jobs[0]["placements"][0]["gpu_share"] == 0.5
        for i in ids:
            c.cancel(int(i))


def test_max_runtime_stops_an_overrunning_job_and_marks_it_failed(head: HeadProcess) -> None:
    job = head.cli("submit", "--gpus", "1", "--max-runtime", "1s", "--", "sleep", "60").stdout.split()[-1]
    quick = head.cli("submit", "--gpus", "1", "--max-runtime", "1m", "--", "true").stdout.split()[-1]
    with head.client() as c:
        done = wait_state(c, int(job), ("failed", "cancelled", "succeeded"), timeout=20)
        assert wait_state(c, int(quick), ("succeeded", "failed"))["state"] == "succeeded"
        kinds = [e["kind"] for e in c.job(int(job))["events"]]
    assert done["state"] == "failed" and done["exit_code"] == 143
    assert "timeout" in kinds
    started = datetime.fromisoformat(done["started_at"])
    finished = datetime.fromisoformat(done["finished_at"])
    assert 0.9 <= (finished - started).total_seconds() < 10


def test_heterogeneous_cluster_from_a_hardware_file_honours_gpu_model(
    head_factory: type[HeadProcess], tmp_path: Path
) -> None:
    spec = tmp_path / "hw.json"
    spec.write_text(
        json.dumps(
            {
                "nodes": [
                    {"name": "a100-1", "gpus": [{"model": "A100"}] * 4},
                    {"name": "t4-1", "gpus": [{"model": "T4", "memory_mib": 15360}] * 2},
                ]
            }
        )
    )
    head = head_factory(extra=["--fake-hardware", str(spec)]).start()
    assert "2 nodes, 6 GPUs (simulated)" in head.ready_line
    job = ok(head.cli("submit", "--gpu-model", "T4|L4", "--", "true")).split()[-1]
    with head.client() as c:
        done = wait_state(c, int(job), ("succeeded",))
    assert done["placements"][0]["node"] == "t4-1"
    refused = head.cli("submit", "--gpu-model", "H100", "--", "true")
    assert refused.returncode == 2 and "models here: A100, T4" in refused.stderr


def test_why_estimates_the_start_from_the_max_runtime_of_the_jobs_in_the_way(head: HeadProcess) -> None:
    blocker = head.cli("submit", "--gpus", "4", "--workers", "2", "--max-runtime", "1h", "--", "sleep", "60")
    blocker_id = int(blocker.stdout.split()[-1])
    waiting = head.cli("submit", "--gpus", "4", "--", "true").stdout.split()[-1]
    with head.client() as c:
        running = wait_state(c, blocker_id, ("running",))
        wait_state(c, int(waiting), ("pending",))
    answer = json.loads(ok(head.cli("why", waiting, "-o", "json")))
    expected = datetime.fromisoformat(running["started_at"]) + timedelta(hours=1)
    assert abs((datetime.fromisoformat(answer["estimated_start"]) - expected).total_seconds()) < 1
    assert "expected to start by" in ok(head.cli("why", waiting))
    head.cli("cancel", str(blocker_id))


def test_drain_and_undrain_a_node_and_a_gpu(head: HeadProcess) -> None:
    job = int(ok(head.cli("submit", "--gpus", "4", "--", "sleep", "60")).split()[-1])
    with head.client() as c:
        node = wait_state(c, job, ("running",))["placements"][0]["node"]
    other = "node-2" if node == "node-1" else "node-1"

    drained = head.cli("drain", node, "--reason", "firmware update")
    assert ok(drained).strip() == (
        f"node {node}: draining; nothing new starts on it, and it becomes drained when job {job} ends"
    )
    assert f"{node}" in ok(head.cli("nodes")) and "draining" in ok(head.cli("nodes"))
    second = int(ok(head.cli("submit", "--gpus", "4", "--", "sleep", "60")).split()[-1])
    third = int(ok(head.cli("submit", "--gpus", "1", "--", "true")).split()[-1])
    with head.client() as c:
        assert wait_state(c, second, ("running",))["placements"][0]["node"] == other
        wait_state(c, third, ("pending",))
        c.cancel(job)
        wait_for(lambda: c.job(job)["state"] == "cancelled", what="the job on the draining node to end")
        wait_for(lambda: _node(c.nodes(), node)["state"] == "drained", what=f"{node} to be drained")
        assert c.job(third)["state"] == "pending"  # a drained node takes nothing new
    events = [e["message"] for e in json.loads(ok(head.cli("show", str(job), "-o", "json")))["events"]]
    assert any(m.startswith(f"attempt 1: worker 0 on {node} GPUs 0,1,2,3") for m in events)

    marked = ok(head.cli("drain", other, "--gpu", "1"))
    assert (
        marked.strip()
        == f"node {other} GPU 1: out of service; nothing new starts on it (job {second} keeps running on it)"
    )
    listing = json.loads(ok(head.cli("nodes", "-o", "json")))
    gpu = _node(listing, other)["gpus"][1]
    assert (gpu["healthy"], gpu["disabled"], gpu["jobs"]) == (False, True, [second])
    assert (_node(listing, node)["state"], _node(listing, node)["drain_requested"]) == ("drained", True)
    assert f"1:{second}(disabled)" in ok(head.cli("nodes"))

    assert ok(head.cli("undrain", node)).strip() == f"node {node}: up; it takes new jobs"
    with head.client() as c:
        assert wait_state(c, third, ("succeeded",))["placements"][0]["node"] == node
    assert ok(head.cli("undrain", other, "--gpu", "1")).strip() == f"node {other} GPU 1: back in service"
    head.cli("cancel", str(second))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["drain", "nope"], "error: no node nope: list nodes with gpupool nodes"),
        (["undrain", "nope"], "error: no node nope: list nodes with gpupool nodes"),
        (["drain", "node-1", "--gpu", "9"], "error: node node-1 has no GPU 9: its GPUs are 0, 1, 2, 3"),
        (["drain", "node-1", "--gpu", "x"], "error: Invalid value for '--gpu'"),
        (["drain"], "error: Missing argument 'node'"),
    ],
)
def test_drain_bad_input_is_one_line_and_exit_code_2(shared_head: HeadProcess, args: list[str], message: str) -> None:
    result = shared_head.cli(*args)
    assert result.returncode == 2, result.stdout
    assert result.stderr.strip().startswith(message) and len(result.stderr.strip().splitlines()) == 1


def test_only_an_admin_may_drain_from_the_cli(shared_head: HeadProcess) -> None:
    database = Database(f"sqlite:///{shared_head.data_dir / 'gpupool.db'}")
    try:
        with database.tx() as s:
            member = create_token(s, "alice", "user", datetime.now().astimezone())
    finally:
        database.close()
    env = {**shared_head.env(), "GPUPOOL_TOKEN": member}
    result = subprocess.run(
        [sys.executable, "-m", "gpupool.cli.main", "drain", "node-1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: alice may not POST /api/v1/nodes/node-1/drain: this needs an admin, with a token of scope admin;"
        " a user may not"
    )
    assert json.loads(ok(shared_head.cli("nodes", "-o", "json")))[0]["state"] == "up"


def _node(listing: list[dict[str, object]], name: str) -> dict[str, object]:
    return next(n for n in listing if n["name"] == name)

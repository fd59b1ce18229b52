"""Issue 19 through the real CLI against a real head (2 nodes x 4 simulated GPUs): a typo never
becomes a job, a job no state of the cluster could run is refused, one that waits for nodes that
are not up says so, and tables read at 80 columns."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from gpupool.domain.jobs import JobSpec
from tests.support.headproc import HeadProcess, wait_for, wait_state

pytestmark = pytest.mark.e2e

TOO_WIDE = "3 workers × 4 GPUs can never run here: all 2 nodes together, idle, hold 2 such workers"


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal with exit code 2, and nothing on stdout."""
    assert (result.returncode, result.stdout) == (2, ""), result
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_a_mistyped_option_is_refused_and_submits_nothing(shared_head: HeadProcess) -> None:
    said = refused(shared_head.cli("submit", "--gpu", "2", "--", "true"))
    assert "No such option: --gpu (did you mean --gpus" in said and "see gpupool submit --help" in said
    refused(shared_head.cli("submit", "--array", "0-9", "--gpus", "0", "--wrkers", "2", "--", "true"))
    with shared_head.client() as c:
        assert c.jobs(include_finished=True) == []


def test_the_command_after_the_double_dash_keeps_its_options(head: HeadProcess) -> None:
    out = ok(head.cli("submit", "--gpus", "0", "--", "echo", "--gpu", "2", "--array", "-x"))
    job = int(out.split()[-1])
    with head.client() as c:
        wait_state(c, job, ("succeeded",))
    assert ok(head.cli("logs", str(job))).splitlines()[-1] == "--gpu 2 --array -x"
    # Without --, the first word that is not an option starts the command, as before.
    job = int(ok(head.cli("submit", "--gpus", "0", "echo", "--gpus", "3")).split()[-1])
    with head.client() as c:
        wait_state(c, job, ("succeeded",))
    assert ok(head.cli("logs", str(job))).splitlines()[-1] == "--gpus 3"


def test_a_gang_wider_than_the_cluster_is_refused_whichever_way_it_comes(shared_head: HeadProcess) -> None:
    said = refused(shared_head.cli("submit", "--gpus", "4", "--workers", "3", "--", "sleep", "30"))
    assert TOO_WIDE in said and "ask for at most 2 workers" in said
    assert TOO_WIDE in refused(
        shared_head.cli("submit", "--array", "0-3", "--gpus", "4", "--workers", "3", "--", "true")
    )
    spec = JobSpec.create(command=["true"], gpus=4, workers=3)
    with shared_head.client() as c:
        for path, body in (
            ("/api/v1/jobs", spec.submission()),
            ("/api/v1/jobs:batch", {"jobs": [JobSpec.create(command=["true"]).submission(), spec.submission()]}),
        ):
            answer = httpx.post(
                shared_head.url + path, json=body, headers={"Authorization": f"Bearer {shared_head.token()}"}
            )
            assert answer.status_code == 422, answer.text
            assert answer.json()["code"] == "unsatisfiable" and TOO_WIDE in answer.json()["message"]
        assert c.jobs(include_finished=True) == []


def test_a_gang_that_needs_a_drained_node_waits_as_unsatisfiable_naming_it(head: HeadProcess) -> None:
    ok(head.cli("drain", "node-2"))
    job = ok(head.cli("submit", "--gpus", "4", "--workers", "2", "--", "true")).split()[-1]
    with head.client() as c:
        wait_for(lambda: c.job(int(job))["reason_code"] == "unsatisfiable", what="the reason")
    words = ok(head.cli("why", job))
    assert f"job {job} is pending: [unsatisfiable] needs 2 workers × 4 GPUs; the nodes that are up hold 1" in words
    assert "it waits for node-2 (drained) to be back in service" in words
    assert "no start estimate: the nodes that are up cannot run it" in words
    answer = json.loads(ok(head.cli("why", job, "-o", "json")))
    assert answer["reason_code"] == "unsatisfiable" and "node-2 (drained)" in answer["reason"]
    listed = json.loads(ok(head.cli("jobs", "-o", "json")))
    assert [(j["id"], j["reason_code"]) for j in listed] == [(int(job), "unsatisfiable")]
    ok(head.cli("undrain", "node-2"))
    with head.client() as c:
        wait_state(c, int(job), ("succeeded",))


@pytest.mark.parametrize(
    ("args", "headers"),
    [
        (["report", "--by", "project"], ["project", "GPU-h", "used GPU-h", "kWh", "jobs started", "queue mean"]),
        (["nodes"], ["NODE", "STATE", "GPUS FREE", "MODEL", "GPU → JOBS"]),
        (["projects"], ["PROJECT", "QUOTA", "LIMIT", "SHARE", "HELD", "PENDING"]),
    ],
)
def test_tables_read_at_80_columns(shared_head: HeadProcess, args: list[str], headers: list[str]) -> None:
    env = {**shared_head.env(), "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "gpupool.cli.main", *args], capture_output=True, text=True, env=env, timeout=60
    )
    lines = [line for line in ok(done).splitlines() if not line.startswith(("walls ", "images "))]  # sentences
    assert all(len(line) <= 80 for line in lines), done.stdout
    head = next(line for line in lines if line.startswith(headers[0]))
    for header in headers:
        assert f"  {header}" in f"  {head}  ", (header, done.stdout)
    assert "…" not in done.stdout


@pytest.mark.parametrize(
    ("workers", "status", "words"),
    [
        ("8:2", 400, "the least (8) is above the most (2)"),
        ("0:4", 400, "from 1 to 4096, got 0"),
        ("1:3", 422, "3 workers × 4 GPUs can never run here"),  # its most: beyond the largest placement there is
    ],
)
def test_an_elastic_range_that_cannot_be_is_refused_with_the_reason(
    shared_head: HeadProcess, workers: str, status: int, words: str
) -> None:
    said = refused(shared_head.cli("submit", "--gpus", "4", "--workers", workers, "--", "sleep", "30"))
    assert words in said
    body = {"command": ["true"], "gpus": 4, "workers": workers}
    answer = httpx.post(
        shared_head.url + "/api/v1/jobs", json=body, headers={"Authorization": f"Bearer {shared_head.token()}"}
    )
    assert answer.status_code == status and words in answer.json()["message"], answer.text
    with shared_head.client() as c:
        assert c.jobs(include_finished=True) == []


def test_an_elastic_job_is_shown_with_its_range(shared_head: HeadProcess) -> None:
    out = ok(shared_head.cli("submit", "--gpus", "1", "--workers", "1:2", "-o", "json", "--", "sleep", "30"))
    job = json.loads(out)
    assert (job["workers"], job["max_workers"]) == (1, 2)
    try:
        with shared_head.client() as c:
            wait_state(c, job["id"], ("running",))
            # It starts on 1 and grows into the idle GPUs at the next cycle.
            wait_for(lambda: len(c.job(job["id"])["placements"]) == 2, timeout=30, what="its second worker")
        listed = ok(shared_head.cli("jobs"))
        assert "2/1:2" in listed, listed
        said = json.loads(ok(shared_head.cli("why", str(job["id"]), "-o", "json")))
        assert "elastic, at its most of 1:2 workers" in said["reason"], said
    finally:
        ok(shared_head.cli("cancel", str(job["id"])))
        with shared_head.client() as c:
            wait_state(c, job["id"], ("cancelled",))

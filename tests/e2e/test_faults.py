"""Faults (issue 15, part 8), end to end on real heads and real processes: a head SIGKILLed in the
middle of a burst of submissions from several clients loses none it acknowledged, and they run
once it is back; a supervisor SIGKILLed under its worker is seen as lost, said in the job's events,
and the job runs again."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from gpupool.client import ClientError
from gpupool.node import rundir
from tests.support.headproc import HeadProcess, pid_alive, wait_for, wait_state

pytestmark = pytest.mark.e2e

CLIENTS = 4


def test_a_head_killed_during_a_burst_of_submissions_loses_none_it_acknowledged(
    head_factory: type[HeadProcess],
) -> None:
    head = head_factory(nodes=1, gpus=1).start()
    token, url = head.token(), head.url
    acknowledged: list[int] = []
    refused: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
            i = 0
            while not stop.is_set():
                body = {"command": ["true"], "gpus": 1, "name": f"burst-{n}-{i}"}
                try:
                    answer = http.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": str(uuid.uuid4())})
                except httpx.TransportError:
                    return  # the head is gone: whatever got no answer may or may not exist
                with lock:
                    if answer.status_code == 201:
                        acknowledged.append(int(answer.json()["id"]))
                    else:
                        refused.append(answer.text)
                i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acknowledged) >= 150, timeout=60, what="150 acknowledged submissions")
    code, _ = head.stop(signal.SIGKILL)  # in the middle of the burst
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert code == -signal.SIGKILL and not refused, refused[:3]

    restarted = head_factory(head.data_dir, nodes=1, gpus=1).start()
    with restarted.client() as c:
        stored = {j["id"]: j for j in c.jobs(include_finished=True, limit=100_000)}
        lost = sorted(set(acknowledged) - set(stored))
        assert not lost, f"{len(lost)} acknowledged submissions are gone, e.g. {lost[:5]}"
        first = min(acknowledged)
        assert wait_state(c, first, ("succeeded",), timeout=30)["state"] == "succeeded"  # they run
    print(f"\n{len(acknowledged)} submissions acknowledged before the SIGKILL, all of them kept")


def test_a_supervisor_killed_under_its_worker_is_seen_lost_and_the_job_runs_again(head: HeadProcess) -> None:
    with head.client() as c:
        job = c.submit(command=["sleep", "300"], gpus=1, max_restarts=1)
        first = wait_state(c, job["id"], ("running",))
        node = first["placements"][0]["node"]
        run = rundir.run_dir(head.data_dir / "nodes" / node, job["id"], 1, 0)
        wait_for(lambda: rundir.read_child(run) is not None, what="the worker to start")
        supervisor, worker = rundir.read_pid(run), rundir.read_child(run)
        assert supervisor and worker
        os.kill(supervisor, signal.SIGKILL)
        again = wait_for(lambda: (j := c.job(job["id"]))["starts"] == 2 and j["state"] == "running" and j, timeout=30)
        kinds = [e["kind"] for e in again["events"]]
        messages = " ".join(e["message"] for e in again["events"])
        assert "lost" in kinds and "requeued" in kinds, kinds
        assert "supervisor" in messages, messages  # says what happened
        assert not pid_alive(worker.pid), "the worker of the lost attempt still runs"
        c.cancel(job["id"])


REPO = Path(__file__).resolve().parents[2]


def test_postgresql_restarted_under_the_head_is_a_503_meanwhile_and_the_head_recovers(
    head_factory: type[HeadProcess], tmp_path: Path
) -> None:
    """A server of its own (scripts/postgres.sh, as tests/support/database.py starts the tests'
    one), stopped and started again while the head runs: requests meanwhile get 503
    ``database_unavailable``, never a 500; afterwards the head takes submissions and its controller
    starts jobs again."""
    cluster, port = f"/tmp/gpupool-pg-fault-{uuid.uuid4().hex[:8]}", str(_free_port())
    script = ["bash", str(REPO / "scripts" / "postgres.sh")]
    started = subprocess.run([*script, cluster, port], capture_output=True, text=True, timeout=600, check=False)
    if started.returncode != 0:
        pytest.skip(f"no PostgreSQL server could be started: {started.stderr.strip()[-300:]}")
    url = started.stdout.strip().splitlines()[-1]
    try:
        head = head_factory(extra=["--db", url]).start()
        with head.client() as c:
            before = c.submit(command=["true"], gpus=1)["id"]
            assert wait_state(c, before, ("succeeded",))["state"] == "succeeded"
            subprocess.run([*script, "stop", cluster], capture_output=True, timeout=120, check=True)
            time.sleep(1.1)  # past the token cache: the door itself must ask the database, and say it is away
            with pytest.raises(ClientError) as down:
                c.submit(command=["true"], gpus=1)
            assert (down.value.status, down.value.code) == (503, "database_unavailable"), down.value.message
            again = subprocess.run([*script, cluster, port], capture_output=True, text=True, timeout=600, check=False)
            assert again.returncode == 0, again.stderr[-300:]
            after = c.submit(command=["true"], gpus=1)["id"]
            assert wait_state(c, after, ("succeeded",), timeout=30)["state"] == "succeeded"
        assert head.proc is not None and head.proc.poll() is None  # it never stopped
    finally:
        subprocess.run([*script, "stop", cluster], capture_output=True, timeout=120, check=False)
        shutil.rmtree(cluster, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

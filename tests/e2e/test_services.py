"""Inference services end to end (issue 17, part A): a real head on the local backend, replicas
that are real HTTP servers (tests/support/replica_server.py), health checked over real HTTP.

One head for the module; the tests run in order on the service ``web`` and each leaves it as the
next expects: two ready replicas on two nodes; a killed replica replaced; a rolling update that
never leaves fewer than desired - 1 ready (the plan's own bound, desired, is proven in
tests/domain/test_services_domain.py; here a slow health check on a loaded machine may cost one);
scaling; a health path that never answers; a taken name; deletion.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.client import GpupoolClient
from tests.support import REPLICA_SERVER
from tests.support.headproc import HeadProcess, pid_alive, wait_for

pytestmark = pytest.mark.e2e

SERVER = REPLICA_SERVER
WAIT = 60


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    # No gateway: these tests post the gateway's load reports themselves (test_gateway_flow.py
    # runs the real one), and a real one's reports would interleave with theirs.
    made = HeadProcess(tmp_path_factory.mktemp("services") / "data").start()
    yield made
    made.kill_everything()


@pytest.fixture(scope="module")
def client(head: HeadProcess) -> Iterator[GpupoolClient]:
    with head.client() as c:
        yield c


def serve(head: HeadProcess, *args: str) -> dict[str, Any]:
    out = head.cli("serve", "-o", "json", *args)
    assert out.returncode == 0, out.stderr + "".join(head.output[-30:])
    return dict(json.loads(out.stdout))


def ready(client: GpupoolClient, name: str, count: int) -> dict[str, Any] | None:
    """The service once exactly ``count`` replicas are ready and none other is alive."""
    s = client.service(name)
    live = [r for r in s["replica_list"] if not r["stopping"]]
    return s if s["replicas"]["ready"] == count and len(live) == count and len(s["endpoints"]) == count else None


def get(endpoint: dict[str, Any], path: str) -> str:
    return httpx.get(f"http://{endpoint['host']}:{endpoint['port']}{path}", timeout=5).text


def test_two_replicas_become_ready_on_two_nodes_and_answer(head: HeadProcess, client: GpupoolClient) -> None:
    made = serve(head, "web", "--replicas", "2", "--max-concurrency", "4", "--", sys.executable, SERVER)
    assert (made["name"], made["project"], made["replicas"]["desired"]) == ("web", "default", 2)
    assert made["url"] is None and made["max_concurrency"] == 4  # no gateway, no URL
    s = wait_for(lambda: ready(client, "web", 2), WAIT, 0.2, "web to have 2 ready replicas")
    assert s["state"] == "ready"
    assert {r["node"] for r in s["replica_list"]} == {"node-1", "node-2"}  # spread
    assert [get(e, "/healthz") for e in s["endpoints"]] == ["ok", "ok"]
    for r in s["replica_list"]:
        job = client.job(r["job_id"])
        assert (job["priority"], job["service"], job["port_env"]) == ("inference", "web", "PORT")
    routes = client.gateway_routes()["routes"]
    assert [(r["name"], r["kind"], len(r["endpoints"])) for r in routes] == [("web", "service", 2)]
    assert {e["host"] for e in routes[0]["endpoints"]} == {"127.0.0.1"}
    listed = json.loads(head.cli("services", "-o", "json").stdout)
    assert [(x["name"], x["state"], x["replicas"]) for x in listed] == [
        ("web", "ready", {"desired": 2, "ready": 2, "starting": 0})
    ]


def test_a_killed_replica_is_started_again_as_the_same_job(head: HeadProcess, client: GpupoolClient) -> None:
    """A replica that dies is one job's restart (after the restart back-off), not a new job."""
    before = client.service("web")
    victim = before["endpoints"][0]
    pid = int(get(victim, "/pid"))
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), 10, what="the replica's process to die")

    def restarted() -> tuple[dict[str, Any], int] | None:
        """The service and its restarted replica's pid, once that replica answers (an endpoint read
        in the moment before the head saw its worker die is the old one, and refuses)."""
        s = ready(client, "web", 2)
        if not s or client.job(int(victim["replica"]))["restarts"] != 1:
            return None
        again = next((e for e in s["endpoints"] if e["replica"] == victim["replica"]), None)
        try:
            return None if again is None else (s, int(get(again, "/pid")))
        except httpx.HTTPError:
            return None

    after, new_pid = wait_for(restarted, WAIT, 0.2, "the killed replica to be started again")
    assert new_pid != pid
    assert {r["job_id"] for r in after["replica_list"]} == {r["job_id"] for r in before["replica_list"]}
    assert [get(e, "/healthz") for e in after["endpoints"]] == ["ok", "ok"]


def test_an_update_rolls_without_losing_ready_capacity(head: HeadProcess, client: GpupoolClient) -> None:
    old = {r["job_id"] for r in client.service("web")["replica_list"]}
    updated = serve(head, "web", "--replicas", "2", "--env", "VERSION=2", "--", sys.executable, SERVER)
    assert updated["replicas"]["desired"] == 2
    lowest = 2

    def rolled() -> dict[str, Any] | None:
        nonlocal lowest
        s = client.service("web")
        lowest = min(lowest, s["replicas"]["ready"])
        live = [r for r in s["replica_list"] if not r["stopping"]]
        done = (
            len(live) == 2 and all(r["current"] and r["ready"] for r in live) and not old & {r["job_id"] for r in live}
        )
        return s if done and len(s["endpoints"]) == 2 else None

    s = wait_for(rolled, WAIT * 2, 0.05, "the update to roll")
    assert lowest >= 2 - 1
    assert [get(e, "/version") for e in s["endpoints"]] == ["2", "2"]
    events = [e["kind"] for j in old for e in client.events(j)]
    assert events.count("cancelled") == 2  # each old replica was stopped, none failed


def test_scale_changes_the_count(head: HeadProcess, client: GpupoolClient) -> None:
    out = head.cli("service", "scale", "web", "--replicas", "3", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["replicas"]["desired"] == 3
    wait_for(lambda: ready(client, "web", 3), WAIT, 0.2, "3 ready replicas")
    assert head.cli("service", "scale", "web", "--replicas", "1").returncode == 0
    s = wait_for(lambda: ready(client, "web", 1), WAIT, 0.2, "1 ready replica")
    assert (s["min_replicas"], s["max_replicas"]) == (1, 1)


def test_a_health_path_that_never_answers_keeps_the_replica_not_ready(head: HeadProcess, client: GpupoolClient) -> None:
    serve(head, "bad", "--gpus", "0", "--health", "/nope", "--ready-timeout", "1s", "--", sys.executable, SERVER)

    def told() -> list[dict[str, Any]]:
        replicas = client.service("bad")["replica_list"]
        return [e for r in replicas for e in client.events(r["job_id"]) if e["kind"] == "replica_not_ready"]

    said = wait_for(told, WAIT, 0.2, "an event saying why the replica is not ready")
    assert "GET http://127.0.0.1:" in said[0]["message"] and "/nope: HTTP 404" in said[0]["message"]
    s = client.service("bad")
    assert (s["state"], s["replicas"]["ready"], s["endpoints"]) == ("starting", 0, [])
    assert head.cli("service", "delete", "bad").returncode == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["Web", "--", "true"], "invalid service name"),
        (["x", "--max-concurrency", "0", "--", "true"], "max concurrency"),
        (["x", "--replicas", "65", "--", "true"], "replicas must be"),
        (["x", "--health", "healthz", "--", "true"], "health path"),
        (["x", "--port-env", "9X", "--", "true"], "--port-env"),
        (["x"], "empty command"),
        (["jobs", "--", "true"], "is reserved"),
        (["metrics", "--", "true"], "is reserved"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(head: HeadProcess, args: list[str], says: str) -> None:
    out = head.cli("serve", *args)
    assert out.returncode == 2 and says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_taken_name_is_a_conflict(head: HeadProcess, client: GpupoolClient) -> None:
    client.set_project("other", quota=1, limit=None, weight=1)
    out = head.cli("serve", "web", "--project", "other", "--", sys.executable, SERVER)
    assert out.returncode == 2 and "service name web is taken" in out.stderr, out.stderr
    admin = {"Authorization": f"Bearer {head.token()}"}
    body = {"name": "web", "project": "other", "command": ["true"]}
    response = httpx.post(f"{head.url}/api/v1/services", json=body, headers=admin)
    assert response.status_code == 409 and response.json()["code"] == "service_exists"


def test_the_gateway_reports_load(head: HeadProcess, client: GpupoolClient) -> None:
    line = {"service": "web", "replica": "", "in_flight": 1, "queued": 0, "requests": 3, "errors": 0}
    assert client.gateway_stats(5.0, [line]) == {"kept": 1}
    admin = {"Authorization": f"Bearer {head.token()}"}
    body = {"window_s": 5, "replicas": [{**line, "in_flight": -1}]}
    bad = httpx.post(f"{head.url}/api/v1/gateway/stats", json=body, headers=admin)
    assert bad.status_code == 422 and set(bad.json()) == {"code", "message"}


def test_service_show_and_metrics_give_the_gateways_load(head: HeadProcess, client: GpupoolClient) -> None:
    """Two reports with latency for web's one replica, as the gateway sends them: the replica's
    figures in show (table and JSON) and its series in /metrics."""
    (replica,) = [r for r in client.service("web")["replica_list"] if not r["stopping"]]
    job = str(replica["job_id"])
    admin = {"Authorization": f"Bearer {head.token()}"}
    for requests, counts, in_flight in ((30, [0, 30, 0, 0], 1), (10, [0, 10, 0, 0], 2)):
        line = {"service": "web", "replica": job, "in_flight": in_flight, "queued": 1, "requests": requests}
        line |= {"errors": 1, "latency_counts": counts, "latency_sum_s": requests * 0.02}
        body = {"window_s": 2, "latency_bounds": [0.01, 0.025, 0.05], "replicas": [line]}
        sent = httpx.post(f"{head.url}/api/v1/gateway/stats", json=body, headers=admin)
        assert sent.json() == {"kept": 1}, sent.text
    body["replicas"] = [{**line, "latency_counts": [1, 2]}]  # one count short of the bounds
    short = httpx.post(f"{head.url}/api/v1/gateway/stats", json=body, headers=admin)
    assert short.status_code == 422 and "latency_counts needs 4 entries" in short.json()["message"]

    shown = json.loads(head.cli("service", "show", "web", "-o", "json").stdout)
    (mine,) = [r for r in shown["replica_list"] if r["job_id"] == replica["job_id"]]
    load = mine["load"]
    assert (load["in_flight"], load["queued"]) == (2, 1)  # the newest report's
    assert load["requests_per_s"] > 0 and load["errors_per_s"] > 0
    assert load["latency_p50_s"] == pytest.approx(0.0175) and load["latency_p99_s"] == pytest.approx(0.02485)
    assert shown["load"]["in_flight"] == 2 and shown["load"]["latency_p50_s"] == pytest.approx(0.0175)
    text = head.cli("service", "show", "web").stdout  # 80 columns: the load columns stay
    row = next(line for line in text.splitlines() if line.lstrip().startswith(job))
    assert "18ms" in row and "25ms" in row, text
    assert "REQ/S" in text and "IN-FLIGHT" in text and "2 in flight, 1 queued" in text, text

    metrics = httpx.get(f"{head.url}/metrics", headers=admin)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.text)
        for s in family.samples
    }
    at = (("replica", job), ("service", "web"))
    assert samples[("gpupool_service_replicas", (("service", "web"), ("state", "ready")))] == 1
    assert samples[("gpupool_service_desired_replicas", (("service", "web"),))] == 1
    assert samples[("gpupool_service_requests_total", at)] == 40
    assert samples[("gpupool_service_errors_total", at)] == 2
    assert samples[("gpupool_service_in_flight", at)] == 2
    assert samples[("gpupool_service_queued", (("service", "web"),))] == 1
    assert samples[("gpupool_service_request_duration_seconds_count", at)] == 40
    assert samples[("gpupool_service_request_duration_seconds_bucket", (("le", "0.01"), *at))] == 0
    assert samples[("gpupool_service_request_duration_seconds_bucket", (("le", "0.025"), *at))] == 40


def test_delete_cancels_the_replicas(head: HeadProcess, client: GpupoolClient) -> None:
    jobs = [r["job_id"] for r in client.service("web")["replica_list"]]
    assert head.cli("service", "delete", "web").returncode == 0
    for job_id in jobs:
        wait_for(lambda j=job_id: client.job(j)["state"] == "cancelled", WAIT, 0.2, f"replica {job_id} cancelled")
    gone = head.cli("service", "show", "web")
    assert gone.returncode == 2 and "no service web" in gone.stderr
    assert client.gateway_routes() == {"routes": []}

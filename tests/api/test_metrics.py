"""GET /metrics over a real store and a real controller: a hand-built cluster (projects with quotas,
a drained node, a down node, a GPU out of service) and jobs in several states and projects; the
text parsed with prometheus_client's own parser, every figure checked against hand arithmetic."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.app import create_app
from gpupool.api.prometheus import SchedulerMetrics
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec
from gpupool.domain.projects import Project
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store.db import Database
from gpupool.store.tokens import Principal, create_token
from gpupool.usecases import jobs as job_service
from gpupool.usecases import nodes as node_service
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

ADMIN = Principal("root", "admin")
ALICE = Principal("alice", "user")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Cluster:
    client: TestClient
    headers: dict[str, str]  # a member's token: any user role may scrape
    join: dict[str, str]  # the node join token's


def spec(project: str, gpus: float, workers: int = 1) -> JobSpec:
    return JobSpec.create(command=("sleep", "1"), project=project, gpus=gpus, workers=workers)


@pytest.fixture
def cluster(db: Database, now: datetime) -> Iterator[Cluster]:
    """4 nodes x 4 GPUs: node-1 and node-2 up (node-2's GPU 3 out of service), node-3 drained,
    node-4 down. Projects a (quota 2, limit 4), b (quota 1, weight 3), default (quota 0).

    t=0    a1 (a, 2 GPUs), a2 (a, 2), b1 (b, 1), b2 (b, 0.5) submitted
    t=30   all four start (each waited 30 s); a3 (a, 4) and d1 (default, 1) submitted, d1 cancelled
    t=40   a1 succeeded, b1 failed; a3 stays pending: a holds 2, and 2 + 4 is beyond its limit 4
    """
    clock = FakeClock(now)
    nodes = uniform(4, 4)
    executor = FakeExecutor(nodes)
    metrics = SchedulerMetrics()
    controller = Controller(
        db,
        executor,
        clock,
        SchedulerConfig(),
        ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf, node_sync_s=0.0),
        on_cycle=metrics.observe_cycle,
        on_first_start=metrics.observe_first_start,
    )
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        member = create_token(s, "alice", "user", now)
        join = create_token(s, "join", "join", now)

    def tick() -> None:
        assert controller.tick() is not None, "every tick schedules here (full_cycle_s=0)"

    tick()  # registers the four nodes
    executor._nodes = nodes[:3]
    tick()  # node-4 is no longer served: down
    for project in (Project.create("a", 2, limit=4), Project.create("b", 1, weight=3), Project.create("default", 0)):
        project_service.set_project(ctx, project, ADMIN, everyone=True)
    node_service.drain(ctx, "node-3", ADMIN)
    node_service.drain(ctx, "node-2", ADMIN, gpu=3)
    first = [("a1", "a", 2.0), ("a2", "a", 2.0), ("b1", "b", 1.0), ("b2", "b", 0.5)]
    ids = {name: job_service.submit(ctx, spec(project, gpus), ALICE).id for name, project, gpus in first}
    clock.advance(30)
    tick()
    job_service.submit(ctx, spec("a", 4), ALICE)
    job_service.cancel(ctx, job_service.submit(ctx, spec("default", 1), ALICE).id, ALICE)
    executor.exit(ids["a1"], 0)
    executor.exit(ids["b1"], 1)
    clock.advance(10)
    tick()
    with TestClient(create_app(ctx, metrics)) as client:
        yield Cluster(client, {"Authorization": f"Bearer {member}"}, {"Authorization": f"Bearer {join}"})


def scrape(cluster: Cluster) -> tuple[Samples, dict[str, str]]:
    """Every sample by (name, sorted labels), and every family's type."""
    response = cluster.client.get("/metrics", headers=cluster.headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    types = {}
    for family in text_string_to_metric_families(response.text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types


def series(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def test_jobs_by_state_and_project(cluster: Cluster) -> None:
    samples, types = scrape(cluster)
    assert types["gpupool_jobs"] == "gauge"
    jobs = {(dict(k)["state"], dict(k)["project"]): v for k, v in series(samples, "gpupool_jobs").items()}
    states = ["pending", "starting", "running", "succeeded", "failed", "cancelled", "preempted", "lost"]
    assert set(jobs) == {(s, p) for s in states for p in ("a", "b", "default")}  # zeros included
    assert {k: v for k, v in jobs.items() if v} == {
        ("succeeded", "a"): 1,
        ("running", "a"): 1,
        ("pending", "a"): 1,
        ("failed", "b"): 1,
        ("running", "b"): 1,
        ("cancelled", "default"): 1,
    }


def test_projects_allocation_quota_limit_and_fair_share(cluster: Cluster) -> None:
    samples, _ = scrape(cluster)

    def by_project(name: str) -> dict[str, float]:
        return {dict(k)["project"]: v for k, v in series(samples, name).items()}

    assert by_project("gpupool_gpus_allocated") == {"a": 2.0, "b": 0.5, "default": 0.0}
    assert by_project("gpupool_gpu_quota") == {"a": 2.0, "b": 1.0, "default": 0.0}
    assert by_project("gpupool_gpu_limit") == {"a": 4.0}  # the others have none
    # Capacity: 7 healthy GPUs on up nodes; beyond all quotas 7 - 3 = 4, split by weight 1 : 3 : 1.
    shares = by_project("gpupool_gpu_fair_share")
    assert shares == pytest.approx({"a": 2 + 4 / 5, "b": 1 + 4 * 3 / 5, "default": 4 / 5})
    # The same figures `gpupool projects` shows.
    listing = cluster.client.get("/api/v1/projects", headers=cluster.headers).json()
    assert {p["name"]: p["fair_share"] for p in listing} == pytest.approx(shares)


def test_nodes_and_gpus_by_state(cluster: Cluster) -> None:
    samples, _ = scrape(cluster)
    nodes = {dict(k)["state"]: v for k, v in series(samples, "gpupool_nodes").items()}
    assert nodes == {"up": 2, "draining": 0, "drained": 1, "down": 1}
    gpus: dict[str, dict[str, float]] = {}
    for labels, value in series(samples, "gpupool_gpus").items():
        gpus.setdefault(dict(labels)["node"], {})[dict(labels)["state"]] = value
    assert gpus["node-2"]["unhealthy"] == 1  # GPU 3, taken out of service
    for node in ("node-3", "node-4"):  # drained; down
        assert gpus[node] == {"allocated": 0, "free": 0, "unhealthy": 0, "unavailable": 4}
    assert all(sum(states.values()) == 4 for states in gpus.values())  # one state per GPU
    # a2 holds 2 GPUs, b2 half of one; 7 usable GPUs in all.
    totals = {state: sum(g[state] for g in gpus.values()) for state in ("allocated", "free", "unhealthy")}
    assert totals == {"allocated": 3, "free": 4, "unhealthy": 1}
    listing = cluster.client.get("/api/v1/nodes", headers=cluster.headers).json()
    assert {n["name"]: n["gpus_free"] for n in listing} == {n: g["free"] for n, g in gpus.items()}


def test_histograms_count_cycles_and_first_starts(cluster: Cluster) -> None:
    samples, types = scrape(cluster)
    assert types["gpupool_scheduler_cycle_seconds"] == types["gpupool_pending_seconds"] == "histogram"
    assert samples[("gpupool_scheduler_cycle_seconds_count", ())] == 4  # four ticks, each scheduled
    assert samples[("gpupool_scheduler_cycle_seconds_bucket", (("le", "+Inf"),))] == 4
    # Four jobs started, each 30 s after its submission; a3 still waits and is not counted.
    assert samples[("gpupool_pending_seconds_count", ())] == 4
    assert samples[("gpupool_pending_seconds_sum", ())] == pytest.approx(120.0)
    assert samples[("gpupool_pending_seconds_bucket", (("le", "15.0"),))] == 0
    assert samples[("gpupool_pending_seconds_bucket", (("le", "30.0"),))] == 4


def test_series_stay_out_of_the_global_registry(cluster: Cluster, db: Database, now: datetime) -> None:
    assert REGISTRY.get_sample_value("gpupool_pending_seconds_count") is None
    other = create_app(HeadContext(db, FakeClock(now), FakeExecutor([]), lambda: None))
    with TestClient(other) as client:
        text = client.get("/metrics", headers=cluster.headers).text
    counts = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert counts["gpupool_pending_seconds_count"] == 0  # its own, empty histograms
    assert scrape(cluster)[0][("gpupool_pending_seconds_count", ())] == 4


def test_metrics_need_a_user_token(cluster: Cluster) -> None:
    client = cluster.client
    missing = client.get("/metrics")
    assert missing.status_code == 401 and missing.json()["code"] == "unauthorized"
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    joining = client.get("/metrics", headers=cluster.join)
    assert joining.status_code == 403 and joining.json()["code"] == "forbidden"
    assert "gpupool_jobs" not in joining.text

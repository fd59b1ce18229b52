"""GET /api/v1/telemetry/latest over a real store, and the client method `gpupool top` uses:
the newest reading of every GPU of every node in one call, optionally only recent ones."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gpupool.api.app import create_app
from gpupool.client.http import ClientError, GpupoolClient
from gpupool.clock import FakeClock
from gpupool.domain.telemetry import TelemetryRetention
from gpupool.node.gpu.fake import FakeProbe
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import telemetry as telemetry_repo
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

NOW = datetime(2026, 3, 14, 16, 0, 0, tzinfo=UTC)
RETENTION = TelemetryRetention(raw_s=15 * 60, minutes_s=7 * 86400)


def client_of(app: TestClient, token: str | None) -> GpupoolClient:
    def through_the_app(request: httpx.Request) -> httpx.Response:
        return app.request(request.method, str(request.url), headers=request.headers, content=request.content)

    return GpupoolClient("http://testserver", token, transport=httpx.MockTransport(through_the_app))


@pytest.fixture
def app(db: Database) -> Iterator[tuple[TestClient, str]]:
    """Two nodes of two GPUs, read every 10 s for a minute with node-2's GPU 1 busy; node-1 last
    answered 5 minutes ago."""
    executor = FakeExecutor(uniform(2, 2))
    start = NOW - timedelta(minutes=10)
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), start)
        token = create_token(s, "alice", "user", start)
    readings = [
        *FakeProbe("node-1", 2).sample("node-1", set(), NOW - timedelta(minutes=5)),
        *(
            r
            for step in range(7)
            for r in FakeProbe("node-2", 2).sample("node-2", {1}, NOW - timedelta(seconds=60 - 10 * step))
        ),
    ]
    with db.tx() as s:
        telemetry_repo.write_samples(s, readings, NOW, RETENTION)
    with TestClient(create_app(HeadContext(db, FakeClock(NOW), executor, lambda: None))) as test_client:
        yield test_client, token


@pytest.fixture
def client(app: tuple[TestClient, str]) -> Iterator[GpupoolClient]:
    with client_of(*app) as c:
        yield c


def test_every_gpu_newest_reading_in_one_call(client: GpupoolClient) -> None:
    latest = client.latest_telemetry()
    assert [(s["node"], s["gpu"]) for s in latest] == [("node-1", 0), ("node-1", 1), ("node-2", 0), ("node-2", 1)]
    times = [datetime.fromisoformat(s["time"]) for s in latest]
    assert times == [NOW - timedelta(minutes=5)] * 2 + [NOW] * 2
    busy = latest[3]
    assert 60 <= busy["utilization_pct"] <= 95 and busy["memory_used_mib"] > 0 and busy["simulated"] is True
    assert latest[2]["utilization_pct"] == 0 and latest[2]["memory_used_mib"] == 0
    assert set(busy) >= {"uuid", "memory_total_mib", "temperature_c", "power_w", "energy_j", "xid_errors"}


def test_since_leaves_out_gpus_not_read_recently(client: GpupoolClient) -> None:
    assert [(s["node"], s["gpu"]) for s in client.latest_telemetry(since="1m")] == [("node-2", 0), ("node-2", 1)]
    assert len(client.latest_telemetry(since="2026-03-14T15:50:00Z")) == 4
    with pytest.raises(ClientError) as refused:
        client.latest_telemetry(since="yesterday")
    assert (refused.value.status, refused.value.code) == (400, "invalid_argument")


def test_latest_needs_a_token(app: tuple[TestClient, str]) -> None:
    with client_of(app[0], None) as anonymous, pytest.raises(ClientError) as refused:
        anonymous.latest_telemetry()
    assert refused.value.status == 401

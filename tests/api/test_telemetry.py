"""GET /api/v1/nodes/{name}/telemetry over a real store, and the client method that calls it:
any authenticated user reads a node's GPU history, raw while it is recent, minutes once older."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
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


@dataclass
class Api:
    client: TestClient
    member: dict[str, str]
    token: str


@pytest.fixture
def api(db: Database) -> Iterator[Api]:
    """Two nodes of two GPUs; node-1's GPU 0 busy. Read every 10 s for the last hour."""
    executor = FakeExecutor(uniform(2, 2))
    probe = FakeProbe("node-1", 2)
    start = NOW - timedelta(hours=1)
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), start)
        member = create_token(s, "alice", "user", start)
    readings = [r for step in range(361) for r in probe.sample("node-1", {0}, start + timedelta(seconds=10 * step))]
    with db.tx() as s:  # one write downsamples as the 361 writes of the hour would have
        telemetry_repo.write_samples(s, readings, NOW, RETENTION)
    ctx = HeadContext(db, FakeClock(NOW), executor, lambda: None)
    with TestClient(create_app(ctx)) as client:
        yield Api(client, {"Authorization": f"Bearer {member}"}, member)


def get(api: Api, path: str = "/api/v1/nodes/node-1/telemetry", **params: object) -> httpx.Response:
    return api.client.get(path, headers=api.member, params=params)


def test_any_user_reads_the_recent_minutes_raw(api: Api) -> None:
    response = get(api, gpu=0)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["node"], body["gpu"], body["resolution"]) == ("node-1", 0, "raw")
    assert body["since"].startswith("2026-03-14T15:45:00") and body["until"].startswith("2026-03-14T16:00:00")
    points = body["points"]
    assert len(points) == 15 * 6 + 1  # every 10 s, both ends included
    first = points[0]
    assert first["gpu"] == 0 and first["samples"] == 1 and first["memory_total_mib"] == 81559
    assert all(60 <= p["utilization_pct"] <= 95 and p["utilization_max_pct"] == p["utilization_pct"] for p in points)
    assert all(p["ecc_errors"] == 0 and p["xid_errors"] == 0 for p in points)
    energy = [p["energy_j"] for p in points]
    assert energy == sorted(energy) and energy[0] > 0


def test_an_older_window_comes_as_minutes_for_every_gpu(api: Api) -> None:
    body = get(api, since="1h").json()
    assert body["resolution"] == "minute" and body["gpu"] is None
    by_gpu = {g: [p for p in body["points"] if p["gpu"] == g] for g in (0, 1)}
    assert [len(points) for points in by_gpu.values()] == [61, 61]
    assert all(p["samples"] == 6 for p in by_gpu[0][:-1]) and by_gpu[0][-1]["samples"] == 1
    assert all(p["utilization_pct"] == 0 and p["utilization_max_pct"] == 0 for p in by_gpu[1])
    assert all(p["ecc_errors"] is None for p in body["points"])  # aggregates keep no error counts
    explicit = get(api, since="2026-03-14T15:50:00Z", until="2026-03-14T15:51:00", resolution="minute").json()
    assert [(p["gpu"], p["time"][:19]) for p in explicit["points"]] == [
        (g, f"2026-03-14T15:{m}:00") for g in (0, 1) for m in (50, 51)
    ]


@pytest.mark.parametrize(
    ("path", "params", "status", "code", "message"),
    [
        ("/api/v1/nodes/nope/telemetry", {}, 404, "node_not_found", "no node nope"),
        (
            "/api/v1/nodes/node-1/telemetry",
            {"gpu": 7},
            404,
            "gpu_not_found",
            "node node-1 has no GPU 7: its GPUs are 0, 1",
        ),
        ("/api/v1/nodes/node-1/telemetry", {"gpu": -1}, 422, "invalid_argument", "gpu:"),
        (
            "/api/v1/nodes/node-1/telemetry",
            {"since": "yesterday"},
            400,
            "invalid_argument",
            "malformed time 'yesterday'",
        ),
        ("/api/v1/nodes/node-1/telemetry", {"since": "5m", "until": "10m"}, 400, "invalid_argument", "must be before"),
        ("/api/v1/nodes/node-1/telemetry", {"resolution": "hour"}, 422, "invalid_argument", "resolution:"),
    ],
)
def test_bad_requests_are_refused_with_a_code_and_a_message(
    api: Api, path: str, params: dict[str, object], status: int, code: str, message: str
) -> None:
    response = get(api, path, **params)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code and message in response.json()["message"]


def test_telemetry_needs_a_token(api: Api) -> None:
    assert api.client.get("/api/v1/nodes/node-1/telemetry").status_code == 401


def test_the_client_reads_telemetry(api: Api) -> None:
    def through_the_app(request: httpx.Request) -> httpx.Response:
        return api.client.request(request.method, str(request.url), headers=request.headers, content=request.content)

    transport = httpx.MockTransport(through_the_app)
    with GpupoolClient("http://testserver", api.token, transport=transport) as client:
        body = client.telemetry("node-1", gpu=1, since="2m")
        assert (body["resolution"], len(body["points"])) == ("raw", 13)
        with pytest.raises(ClientError) as refused:
            client.telemetry("node-1", gpu=5)
    assert (refused.value.status, refused.value.code) == (404, "gpu_not_found")

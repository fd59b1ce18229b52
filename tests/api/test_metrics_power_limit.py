"""GET /metrics carries each GPU's power limit under dcgm-exporter's name,
``DCGM_FI_DEV_POWER_MGMT_LIMIT`` (watts), from its newest sample; a GPU whose probe does not read
the limit has no series (never a 0)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from datetime import datetime

from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.app import create_app
from gpupool.api.prometheus import SchedulerMetrics
from gpupool.clock import FakeClock
from gpupool.domain.telemetry import GpuSample, TelemetryRetention
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_store
from gpupool.store import telemetry
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient


def test_the_limit_per_gpu_is_a_dcgm_series(db: Database, now: datetime) -> None:
    clock = FakeClock(now)
    (node,) = uniform(1, 2)
    with db.tx() as s:
        token = create_token(s, "admin", "admin", now)
        node_store.register_nodes(s, [node], now)
        base = GpuSample(node.name, 0, node.gpus[0].uuid, now, 0, 81920, True, power_w=120.0)
        capped = replace(base, power_limit_w=400.0)
        unread = replace(base, index=1, uuid=node.gpus[1].uuid)
        telemetry.write_samples(s, [capped, unread], now, TelemetryRetention())
    ctx = HeadContext(db, clock, FakeExecutor([node], clock=clock), lambda: None)
    with TestClient(create_app(ctx, SchedulerMetrics())) as client:
        text = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    limit = families["DCGM_FI_DEV_POWER_MGMT_LIMIT"]
    assert limit.type == "gauge"
    assert [(s.labels["gpu"], s.labels["Hostname"], s.value) for s in limit.samples] == [("0", node.name, 400.0)]

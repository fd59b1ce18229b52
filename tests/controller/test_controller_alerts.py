"""Alerts on a real controller and store, with a fake probe the test heats up or makes report XID
errors, and nodes that vanish: each alert is raised once, shown as events (on the node and on the
job using the GPU), in the API and in /metrics, and cleared when its condition is gone; a head
restart does not raise old XID errors again."""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.alerts import AlertRules
from gpupool.domain.jobs import JobSpec
from gpupool.domain.nodes import Node
from gpupool.domain.telemetry import GpuSample
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.orm import EventRow
from gpupool.store.tokens import create_token
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import USER, FakeExecutor

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

SETTINGS = ControllerSettings(
    full_cycle_s=0.0,
    usage_every_s=math.inf,
    node_sync_s=0.0,
    telemetry_every_s=5.0,
    alerts=AlertRules(temperature_c=85.0),
)


class Sick(FakeExecutor):
    """Simulated readings, with what the test sets: temperatures, XID counts, nodes gone."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(uniform(2, 2), clock)
        self.temperature: dict[tuple[str, int], float] = {}
        self.xid: dict[tuple[str, int], int] = {}
        self.gone: set[str] = set()

    def nodes(self) -> list[Node]:
        return [n for n in super().nodes() if n.name not in self.gone]

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        out = []
        for s in super().telemetry(node, busy):
            key = (s.node, s.index)
            if key in self.temperature:
                s = replace(s, temperature_c=self.temperature[key])
            if key in self.xid:
                s = replace(s, xid_errors=self.xid[key], last_xid=48)
            out.append(s)
        return out


class Head:
    def __init__(self, db: Database, executor: Sick | None = None) -> None:
        self.db = db
        self.clock = executor.clock if executor is not None and isinstance(executor.clock, FakeClock) else FakeClock()
        self.executor = executor or Sick(self.clock)
        self.controller = Controller(db, self.executor, self.clock, SchedulerConfig(), SETTINGS)
        self.ctx = HeadContext(db, self.clock, self.executor, self.controller.wake)
        with db.tx() as s:
            node_repo.register_nodes(s, self.executor.nodes(), self.clock.now())
            self.token = create_token(s, "admin", "admin", self.clock.now())

    def run_for(self, seconds: float) -> None:
        for _ in range(round(seconds)):
            self.clock.advance(1)
            self.controller.tick()

    def get(self, path: str) -> Any:
        with TestClient(create_app(self.ctx)) as client:
            response = client.get(path, headers={"Authorization": f"Bearer {self.token}"})
            assert response.status_code == 200, response.text
            return response.json() if path.startswith("/api") else response.text

    def alerts(self, all: bool = False) -> list[tuple[str, str, int | None]]:
        listing = self.get("/api/v1/alerts" + ("?all=true" if all else ""))
        return [(a["kind"], a["node"], a["gpu"]) for a in listing]

    def metric(self, name: str) -> dict[str, float]:
        return {
            s.labels["kind"]: s.value
            for f in text_string_to_metric_families(self.get("/metrics"))
            for s in f.samples
            if s.name == name
        }

    def node_events(self, kind: str) -> list[tuple[str | None, int | None, str]]:
        with self.db.tx() as s:
            rows = s.query(EventRow).filter(EventRow.kind == kind).order_by(EventRow.id)
            return [(r.node, r.job_id, r.message) for r in rows]


def test_a_hot_gpu_raises_one_alert_on_node_and_job_and_clears_when_it_cools(db: Database) -> None:
    h = Head(db)
    job = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=1), USER)
    h.run_for(2)
    placement = job_service.get(h.ctx, job.id).placements[0]
    hot = (placement.node, placement.gpus[0])
    h.executor.temperature[hot] = 93.0
    h.run_for(6)
    assert h.alerts() == [("gpu_temperature", hot[0], hot[1])]
    raised = h.node_events("alert_gpu_temperature")
    assert [(node, job_id) for node, job_id, _ in raised] == [(hot[0], None), (hot[0], job.id)]
    assert f"GPU {hot[1]} of node {hot[0]} is at 93 °C" in raised[0][2]
    assert h.metric("gpupool_alerts_active") == {"gpu_temperature": 1, "gpu_xid": 0, "node_down": 0}
    assert h.metric("gpupool_alerts_total")["gpu_temperature"] == 1

    h.run_for(20)  # still hot: nothing new
    assert len(h.node_events("alert_gpu_temperature")) == 2
    h.executor.temperature[hot] = 70.0
    h.run_for(5)
    assert h.alerts() == [] and h.alerts(all=True) == [("gpu_temperature", hot[0], hot[1])]
    assert [job_id for _, job_id, _ in h.node_events("alert_cleared")] == [None, job.id]
    assert h.metric("gpupool_alerts_active")["gpu_temperature"] == 0
    assert h.metric("gpupool_alerts_total")["gpu_temperature"] == 1


def test_xid_errors_raise_once_and_a_restarted_head_does_not_raise_them_again(db: Database) -> None:
    h = Head(db)
    h.run_for(1)
    h.executor.xid[("node-2", 1)] = 2
    h.run_for(5)
    assert h.alerts() == [("gpu_xid", "node-2", 1)]
    restarted = Head(db, h.executor)  # same store, same probe counters, a fresh controller
    restarted.run_for(12)
    assert len(restarted.node_events("alert_gpu_xid")) == 1
    h.executor.xid[("node-2", 1)] = 3
    restarted.run_for(5)
    listing = restarted.get("/api/v1/alerts")
    assert len(listing) == 1 and listing[0]["value"] == 3.0  # the same alert, kept active by the new error
    restarted.clock.advance(3600)
    restarted.run_for(5)
    assert restarted.alerts() == []


def test_a_node_that_goes_down_raises_an_alert_cleared_when_it_is_back(db: Database) -> None:
    h = Head(db)
    h.run_for(1)
    h.executor.gone.add("node-2")
    h.run_for(2)
    assert h.alerts() == [("node_down", "node-2", None)]
    assert h.metric("gpupool_alerts_active")["node_down"] == 1
    h.run_for(5)
    assert len(h.node_events("alert_node_down")) == 1
    h.executor.gone.clear()
    h.run_for(2)
    assert h.alerts() == [] and h.node_events("alert_cleared")[0][2] == "node node-2 is back"

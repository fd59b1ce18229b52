"""The DCGM-named GPU series of GET /metrics come from each GPU's newest telemetry sample, with
dcgm-exporter's labels, so Grafana dashboards made for dcgm-exporter work unchanged; a dead node's
GPUs drop out (its last readings are stale)."""

from __future__ import annotations

import math
import warnings
from datetime import datetime

from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.app import create_app
from gpupool.api.prometheus import SchedulerMetrics
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store.db import Database
from gpupool.store.tokens import Principal, create_token
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

DCGM = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
)


def test_dcgm_series_per_gpu_from_the_latest_samples(db: Database, now: datetime) -> None:
    clock = FakeClock(now)
    nodes = uniform(2, 2)
    executor = FakeExecutor(nodes, clock=clock)
    settings = ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf, node_sync_s=0.0, telemetry_every_s=5.0)
    controller = Controller(db, executor, clock, SchedulerConfig(), settings)
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        token = create_token(s, "alice", "user", now)
    job = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=1), Principal("alice", "user")).id
    controller.tick()
    for _ in range(3):  # a few samples, 5 s apart
        clock.advance(5)
        controller.tick()
    busy = job_service.get(ctx, job).placements[0]

    def scrape() -> dict[str, dict[tuple[str, int], tuple[dict[str, str], float]]]:
        with TestClient(create_app(ctx, SchedulerMetrics())) as client:
            text = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
        out: dict[str, dict[tuple[str, int], tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("DCGM_"):
                    key = (sample.labels["Hostname"], int(sample.labels["gpu"]))
                    out.setdefault(sample.name, {})[key] = (sample.labels, sample.value)
        return out

    series = scrape()
    assert set(DCGM) <= set(series)
    gpus = {(n.name, g.index) for n in nodes for g in n.gpus}
    for name in DCGM:
        assert set(series[name]) == gpus, name
    labels, util = series["DCGM_FI_DEV_GPU_UTIL"][(busy.node, busy.gpus[0])]
    assert util > 20
    assert labels["UUID"].startswith("GPU-") or labels["UUID"]
    assert labels["modelName"] == nodes[0].gpus[0].model and labels["device"] == f"nvidia{busy.gpus[0]}"
    assert labels["simulated"] == "true"
    idle = [v for key, (_, v) in series["DCGM_FI_DEV_GPU_UTIL"].items() if key != (busy.node, busy.gpus[0])]
    assert max(idle) < util
    for key in gpus:
        used, free = series["DCGM_FI_DEV_FB_USED"][key][1], series["DCGM_FI_DEV_FB_FREE"][key][1]
        total = next(g.memory_mib for n in nodes for g in n.gpus if (n.name, g.index) == key)
        assert used + free == total
    # The node without the job dies: its GPUs' series go, the others stay.
    gone = next(n.name for n in nodes if n.name != busy.node)
    executor._nodes = [n for n in nodes if n.name != gone]
    controller.tick()
    assert {host for host, _ in scrape()["DCGM_FI_DEV_GPU_UTIL"]} == {busy.node}

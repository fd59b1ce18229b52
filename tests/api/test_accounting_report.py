"""The accounting report over a real store: a controller runs jobs on simulated GPUs under a
virtual clock, and the report's figures are checked against the stored workers and readings."""

from __future__ import annotations

import csv
import io
import json
import warnings
from datetime import datetime, timedelta

import httpx
import pytest
from sqlalchemy import select

from gpupool.api.app import create_app
from gpupool.cli import report as report_cli
from gpupool.cli.main import main
from gpupool.client.http import ClientError, GpupoolClient
from gpupool.domain.jobs import JobSpec
from gpupool.store import telemetry as telemetry_repo
from gpupool.store.db import Database
from gpupool.store.orm import WorkerRow
from gpupool.store.tokens import create_token
from gpupool.usecases import accounting as accounting_service
from gpupool.usecases import jobs as job_service
from tests.support.executor import USER
from tests.support.harness import Harness

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient


def _run(h: Harness, seconds: int) -> None:
    for _ in range(seconds):
        h.tick()


def test_report_matches_the_stored_workers_and_readings(db: Database) -> None:
    h = Harness(db)
    h.tick()
    whole = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=2), USER)
    _run(h, 60)
    half = job_service.submit(h.ctx, JobSpec.create(command=["eval"], gpus=0.5), USER)
    _run(h, 60)
    job_service.cancel(h.ctx, whole.id, USER)
    h.executor.exit(whole.id, -15)
    _run(h, 30)
    now = h.clock.now()

    rep = accounting_service.report(h.ctx, since="1h", by="job")
    by_job = {g.key: g for g in rep.groups}
    assert set(by_job) == {str(whole.id), str(half.id)}
    with db.tx() as s:
        rows = {w.job_id: w for w in s.scalars(select(WorkerRow))}
        expected: dict[int, tuple[float, float, float]] = {}
        for job_id, w in rows.items():
            assert w.started_at is not None
            end = w.finished_at or now
            share = w.gpu_share or 1.0
            hours = (end - w.started_at).total_seconds() / 3600
            used = energy = 0.0
            for gpu in w.gpus:
                _, pts = telemetry_repo.history(s, w.node, gpu, w.started_at, end)
                utils = [p.utilization_pct for p in pts if p.utilization_pct is not None]
                used += hours * share * sum(utils) / len(utils) / 100
                joules = [p.energy_j for p in pts if p.energy_j is not None]
                energy += (joules[-1] - joules[0]) * share / 3.6e6
            expected[job_id] = (hours * share * len(w.gpus), used, energy)
    assert rows[whole.id].finished_at is not None and rows[half.id].finished_at is None
    for job_id, (gpu_h, used, kwh) in expected.items():
        g = by_job[str(job_id)]
        assert g.gpu_hours == pytest.approx(gpu_h) and gpu_h > 0
        assert g.used_gpu_hours == pytest.approx(used) and 0 < used < gpu_h
        assert g.energy_kwh == pytest.approx(kwh) and kwh > 0
        assert g.coverage == pytest.approx(1.0)
        assert g.queue.count == 1 and g.queue.max_s is not None and g.queue.max_s < 5
    # the whole job held 2 GPUs for about 2 minutes, the half job half a GPU for about 1.5 minutes
    assert by_job[str(whole.id)].gpu_hours == pytest.approx(2 * 120 / 3600, rel=0.05)
    assert by_job[str(half.id)].gpu_hours == pytest.approx(0.5 * 90 / 3600, rel=0.05)

    (project,) = accounting_service.report(h.ctx, since="1h").groups
    assert project.gpu_hours == pytest.approx(sum(e[0] for e in expected.values()))
    assert project.queue.count == 2

    later = accounting_service.report(h.ctx, since=(now - timedelta(seconds=10)).isoformat(), by="user")
    assert later.groups[0].key == "alice"
    assert later.groups[0].gpu_hours == pytest.approx(0.5 * 10 / 3600)  # only the half job still runs
    assert later.groups[0].queue.count == 0
    assert isinstance(later.since, datetime)


def test_the_api_client_and_cli_report(
    db: Database, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    h = Harness(db)
    h.tick()
    job = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=1), USER)
    _run(h, 30)
    with db.tx() as s:
        token = create_token(s, "bob", "user", h.clock.now())  # any user sees every group
    with TestClient(create_app(h.ctx)) as app:

        def through_the_app(request: httpx.Request) -> httpx.Response:
            return app.request(request.method, str(request.url), headers=request.headers, content=request.content)

        def client(url: str) -> GpupoolClient:
            return GpupoolClient("http://testserver", token, transport=httpx.MockTransport(through_the_app))

        assert app.get("/api/v1/report").status_code == 401
        with client("") as c:
            body = c.report(since="1h", by="job")
            assert [g["key"] for g in body["groups"]] == [str(job.id)]
            assert body["groups"][0]["gpu_hours"] == pytest.approx(29 / 3600, abs=2 / 3600)
            with pytest.raises(ClientError) as bad:
                c.report(since="1h", until="2h")
            assert bad.value.status == 400
        monkeypatch.setattr(report_cli, "client", client)
        with pytest.raises(SystemExit) as done:
            main(["report", "--since", "1h", "--by", "job", "-o", "csv"])
        assert done.value.code == 0
        rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
        assert rows[0] == ["job", *report_cli.COLUMNS[1:]]
        assert len(rows) == 2 and rows[1][0] == str(job.id)
        assert float(rows[1][1]) == pytest.approx(body["groups"][0]["gpu_hours"], rel=0.2)
        assert float(rows[1][3]) == pytest.approx(1.0) and rows[1][5] == "1"
        with pytest.raises(SystemExit):
            main(["report", "--since", "1h", "-o", "json"])
        data = json.loads(capsys.readouterr().out)
        assert data["by"] == "project" and data["groups"][0]["queue_count"] == 1
        with pytest.raises(SystemExit):
            main(["report", "--since", "1h", "--by", "user"])
        table = capsys.readouterr().out
        assert "alice" in table and "GPU-h" in table

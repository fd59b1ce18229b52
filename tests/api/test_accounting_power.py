"""The report's power figures (issue 33): a GPU's mean draw and energy per GPU-hour from the
energy counter, and the energy saved by power modes, estimated on the GPU model's curve."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from gpupool.cli import report as report_cli
from gpupool.domain.accounting import GroupBy, Reading, WorkerSpan, compute, relative_energy
from gpupool.domain.jobs import JobSpec
from gpupool.domain.power import default_curve
from gpupool.domain.projects import Project
from gpupool.store import power_curves as curve_repo
from gpupool.store.db import Database
from gpupool.store.orm import GpuRow
from gpupool.store.tokens import Principal
from gpupool.usecases import accounting as accounting_service
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from tests.support.executor import USER
from tests.support.harness import Harness

ADMIN = Principal("root", "admin")
T0 = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
H100 = default_curve("H100", 700)


def test_relative_energy_of_each_mode_on_the_h100_curve() -> None:
    assert relative_energy(None, H100) == relative_energy("max", H100) == 1.0
    assert relative_energy("efficient", H100) == pytest.approx(0.864)  # 500 W: the least within -20 %
    assert relative_energy("400W", H100) == pytest.approx(0.831)  # a measured point
    assert relative_energy("450W", H100) == pytest.approx((0.831 + 0.864) / 2)  # between two
    assert relative_energy("700W", H100) == relative_energy("900W", H100) == 1.0  # at or above the default
    assert relative_energy("bogus", H100) == 1.0


def test_power_and_saving_by_hand() -> None:
    """Two jobs, each one GPU for an hour, metered at 0.5 and 0.36 kWh: 500 W and 360 W on average;
    the efficient one would have used 0.36 / 0.864 kWh at max."""
    end = T0 + timedelta(hours=1)
    spans = [
        WorkerSpan(1, "p", "alice", "n", (0,), 1.0, T0, end, "max"),
        WorkerSpan(2, "p", "alice", "n", (1,), 1.0, T0, end, "efficient"),
    ]
    readings = {
        ("n", 0): [Reading(T0, 90.0, 0.0), Reading(end, 90.0, 0.5 * 3.6e6)],
        ("n", 1): [Reading(T0, 90.0, 0.0), Reading(end, 90.0, 0.36 * 3.6e6)],
    }
    curves = {("n", 0): H100, ("n", 1): H100}
    by_job = {g.key: g for g in compute(spans, [], readings, T0, end, end, GroupBy.JOB, curves)}
    assert by_job["1"].avg_power_w == pytest.approx(500.0) and by_job["1"].energy_saved_kwh == 0.0
    assert by_job["2"].avg_power_w == pytest.approx(360.0)
    assert by_job["2"].kwh_per_gpu_hour == pytest.approx(0.36)
    assert by_job["2"].energy_saved_kwh == pytest.approx(0.36 / 0.864 - 0.36)
    unread = compute(spans[:1], [], {}, T0, end, end, GroupBy.JOB, curves)[0]
    assert unread.avg_power_w is None and unread.kwh_per_gpu_hour is None  # no counter: unknown, not 0


def test_the_report_over_a_store_has_the_power_fields(db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    h = Harness(db)
    h.tick()
    plain = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=1), USER)
    frugal = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=1, gpu_power="efficient"), USER)
    for _ in range(90):
        h.tick()
    data = accounting_service.report(h.ctx, since="1h", by="job").to_dict()
    by_job = {g["key"]: g for g in data["groups"]}
    for job in (plain, frugal):
        g = by_job[str(job.id)]
        assert g["energy_kwh"] > 0 and g["avg_power_w"] > 0
        assert g["kwh_per_gpu_hour"] == pytest.approx(g["avg_power_w"] / 1000)
    assert by_job[str(plain.id)]["energy_saved_kwh"] == 0.0
    assert by_job[str(frugal.id)]["energy_saved_kwh"] == 0.0  # GPUs named "GPU": no known curve, no guess
    with db.tx() as s:
        s.execute(update(GpuRow).values(model="Simulated-H100"))
    data = accounting_service.report(h.ctx, since="1h", by="job").to_dict()
    by_job = {g["key"]: g for g in data["groups"]}
    assert by_job[str(plain.id)]["energy_saved_kwh"] == 0.0
    saved = by_job[str(frugal.id)]["energy_saved_kwh"]
    used = by_job[str(frugal.id)]["energy_kwh"]
    assert saved == pytest.approx(used / relative_energy("efficient", H100) - used)
    json.dumps(data)  # -o json carries them as they are
    report_cli.console.print(report_cli.render_table(data))
    table = capsys.readouterr().out
    assert "avg W" in table and "saved kWh" in table


def test_the_saving_follows_a_calibrated_curve_and_the_projects_default_mode(db: Database) -> None:
    """A job without a mode in a project whose default is efficient saved energy too; a model's
    calibrated curve replaces its family's default in the estimate."""
    h = Harness(db)
    h.tick()
    project_service.set_project(h.ctx, Project.create("default", 2, gpu_power="efficient"), ADMIN, everyone=True)
    with db.tx() as s:
        s.execute(update(GpuRow).values(model="Simulated-H100"))
        calibrated = [  # a model that saves 40 % at its efficient point
            {"kind": "limit", "value": 700, "speed": 1.0, "energy": 1.0, "watts": 700.0},
            {"kind": "limit", "value": 450, "speed": 0.85, "energy": 0.6, "watts": 450.0},
        ]
        curve_repo.save_curve(s, "Simulated-H100", "node-1", calibrated, T0)
    job = job_service.submit(h.ctx, JobSpec.create(command=["train"], gpus=1), USER)
    for _ in range(90):
        h.tick()
    group = {g["key"]: g for g in accounting_service.report(h.ctx, since="1h", by="job").to_dict()["groups"]}
    used, saved = group[str(job.id)]["energy_kwh"], group[str(job.id)]["energy_saved_kwh"]
    assert used > 0 and saved == pytest.approx(used / 0.6 - used)

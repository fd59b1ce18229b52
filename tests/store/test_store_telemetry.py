"""Telemetry history on both engines, on a virtual clock: raw samples roll into minute aggregates
as they leave the raw window, old minutes go, and the tables stay bounded however long it runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from gpupool.domain.telemetry import GpuSample, Resolution, TelemetryRetention
from gpupool.node.gpu.fake import FakeProbe
from gpupool.store import telemetry
from gpupool.store.db import Database
from gpupool.store.orm_telemetry import GpuMinuteRow, GpuSampleRow

T0 = datetime(2026, 3, 14, 15, 9, 0, tzinfo=UTC)  # on a minute
SHORT = TelemetryRetention(raw_s=120, minutes_s=20 * 60)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reading(
    gpu: int,
    t: float,
    util: float | None,
    power: float | None = 100.0,
    energy: float | None = None,
    memory: int = 1000,
    temperature: float = 50.0,
    node: str = "node-1",
) -> GpuSample:
    return GpuSample(
        node=node,
        index=gpu,
        uuid=f"GPU-{node}-{gpu}",
        time=at(t),
        memory_used_mib=memory,
        memory_total_mib=81920,
        simulated=True,
        utilization_pct=util,
        temperature_c=temperature,
        power_w=power,
        energy_j=energy,
        ecc_errors=0,
        xid_errors=0,
    )


def write(db: Database, samples: list[GpuSample], now: float, retention: TelemetryRetention = SHORT) -> None:
    with db.tx() as s:
        telemetry.write_samples(s, samples, at(now), retention)


def counts(db: Database) -> tuple[int, int]:
    with db.tx() as s:
        raw = s.scalar(select(func.count()).select_from(GpuSampleRow)) or 0
        minutes = s.scalar(select(func.count()).select_from(GpuMinuteRow)) or 0
    return raw, minutes


def test_samples_leaving_the_raw_window_become_a_minute_aggregate(db: Database) -> None:
    utils = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    first_minute = [
        reading(0, 10 * i, u, power=100 + 10 * i, energy=1000.0 * i, memory=1000 * (i + 1), temperature=40 + i)
        for i, u in enumerate(utils)
    ]
    first_minute[2] = reading(0, 20, None, power=None, energy=2000.0)  # a reading the GPU refused
    write(db, first_minute, now=60)
    assert counts(db) == (6, 0)  # all still in the raw window
    write(db, [reading(0, 180, 99.0)], now=180)  # the raw window now starts at minute 1
    assert counts(db) == (1, 1)
    with db.tx() as s:
        resolution, points = telemetry.history(s, "node-1", 0, at(0), at(59), Resolution.MINUTE)
    assert resolution is Resolution.MINUTE and len(points) == 1
    p = points[0]
    assert (p.time, p.samples, p.memory_total_mib) == (T0, 6, 81920)
    assert p.utilization_pct == pytest.approx((10 + 20 + 40 + 50 + 60) / 5)  # the refused one is not a zero
    assert p.utilization_max_pct == 60.0
    assert p.memory_used_mib == pytest.approx((1000 + 2000 + 1000 + 4000 + 5000 + 6000) / 6)
    assert p.temperature_c == 50.0  # the peak: reading() defaults to 50 for the refused one
    assert p.power_w == pytest.approx((100 + 110 + 130 + 140 + 150) / 5)
    assert p.energy_j == 5000.0  # the counter at the minute's last sample


def test_late_samples_merge_into_their_minute(db: Database) -> None:
    write(db, [reading(0, 0, 10.0), reading(0, 30, 30.0)], now=30)
    write(db, [], now=200)  # minute 0 is aggregated
    write(db, [reading(0, 45, 80.0, energy=7.0)], now=210)  # a node whose clock lags sends it late
    assert counts(db) == (0, 1)
    with db.tx() as s:
        _, (p,) = telemetry.history(s, "node-1", 0, at(0), at(59), Resolution.MINUTE)
    assert (p.samples, p.utilization_pct, p.utilization_max_pct, p.energy_j) == (3, 40.0, 80.0, 7.0)


def test_the_tables_stay_bounded_however_long_it_runs(db: Database) -> None:
    """Two GPUs read every 15 s for 90 minutes, 2 minutes raw and 20 minutes of aggregates kept."""
    probe = FakeProbe("node-1", 2)
    every, raw_per_gpu, minutes_per_gpu = 15, (120 + 60) // 15 + 1, 20 + 1
    for step in range(90 * 60 // every + 1):
        now = step * every
        write(db, probe.sample("node-1", {0}, at(now)), now=now)
        raw, minutes = counts(db)
        assert raw <= 2 * raw_per_gpu and minutes <= 2 * minutes_per_gpu, f"at {now}s: {raw} raw, {minutes} minutes"
    assert raw >= 2 * (120 // every) and minutes >= 2 * 18  # and what is kept is what was promised
    end = at(90 * 60)
    with db.tx() as s:
        resolution, points = telemetry.history(s, "node-1", None, end - timedelta(minutes=19), end)
    assert resolution is Resolution.MINUTE
    for gpu in (0, 1):
        minutes_seen = [p.time for p in points if p.index == gpu]
        assert minutes_seen == [end - timedelta(minutes=19 - m) for m in range(20)], "no gap at the raw window"
        assert all(p.samples == 4 for p in points if p.index == gpu and p.time < end)
    busy = [p.utilization_pct or 0 for p in points if p.index == 0]
    idle = [p.utilization_pct for p in points if p.index == 1]
    assert min(busy) >= 60 and set(idle) == {0.0}


def test_auto_answers_raw_until_part_of_the_window_is_downsampled(db: Database) -> None:
    for t in range(0, 301, 10):
        write(db, [reading(0, t, float(t % 100)), reading(1, t, 5.0)], now=t, retention=SHORT)
    with db.tx() as s:
        recent = telemetry.history(s, "node-1", 0, at(200), at(300))
        older = telemetry.history(s, "node-1", 0, at(0), at(300))
        both = telemetry.history(s, "node-1", None, at(250), at(300), Resolution.RAW)
    assert recent[0] is Resolution.RAW
    assert [p.time for p in recent[1]] == [at(t) for t in range(200, 301, 10)]
    assert recent[1][0].utilization_pct == 0.0 and recent[1][-1].samples == 1
    assert older[0] is Resolution.MINUTE
    assert [p.time for p in older[1]] == [at(60 * m) for m in range(6)]
    assert [p.samples for p in older[1]] == [6, 6, 6, 6, 6, 1]
    assert [(p.index, p.time) for p in both[1]] == [(g, at(t)) for g in (0, 1) for t in range(250, 301, 10)]


def test_old_minutes_are_pruned(db: Database) -> None:
    write(db, [reading(0, 0, 50.0)], now=0)
    write(db, [], now=200)
    assert counts(db) == (0, 1)
    write(db, [], now=20 * 60)
    assert counts(db) == (0, 1)  # 20 minutes after the minute began: still kept
    write(db, [], now=20 * 60 + 1)
    assert counts(db) == (0, 0)


def test_latest_is_the_newest_sample_of_every_gpu(db: Database) -> None:
    write(db, [reading(0, 0, 1.0), reading(1, 0, 2.0), reading(0, 0, 9.0, node="node-2")], now=0)
    write(db, [reading(0, 5, 3.0)], now=5)
    with db.tx() as s:
        newest = telemetry.latest(s)
        fresh = telemetry.latest(s, since=at(1))
    assert [(r.node, r.index, r.time, r.utilization_pct) for r in newest] == [
        ("node-1", 0, at(5), 3.0),
        ("node-1", 1, at(0), 2.0),
        ("node-2", 0, at(0), 9.0),
    ]
    assert newest[0] == reading(0, 5, 3.0)  # every field round-trips
    assert [(r.node, r.index) for r in fresh] == [("node-1", 0)]


def test_the_power_limit_is_kept_raw_and_a_minute_keeps_its_lowest(db: Database) -> None:
    """A limit lowered mid-minute (a cap applied) shows in the minute as the lowest in force; a
    probe that does not read the limit leaves it null, never a made-up default."""
    from dataclasses import replace

    limits = [700.0, 700.0, 400.0, None]
    write(db, [replace(reading(0, 10 * i, 50.0), power_limit_w=w) for i, w in enumerate(limits)], now=40)
    with db.tx() as s:
        (newest,) = telemetry.latest(s)
        _, raw = telemetry.history(s, "node-1", 0, at(0), at(59), Resolution.RAW)
    assert newest.power_limit_w is None and [p.power_limit_w for p in raw] == limits
    write(db, [reading(0, 180, 99.0)], now=180)  # minute 0 is aggregated
    with db.tx() as s:
        _, (minute,) = telemetry.history(s, "node-1", 0, at(0), at(59), Resolution.MINUTE)
    assert minute.power_limit_w == 400.0

"""Accounting arithmetic against a scenario computed by hand (window 10:00-14:00, now 15:00)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpupool.domain.accounting import GroupBy, JobStart, Reading, WorkerSpan, compute, percentile


def at(hh: int, mm: int = 0) -> datetime:
    return datetime(2026, 11, 23, hh, mm, tzinfo=UTC)


SINCE, UNTIL, NOW = at(10), at(14), at(15)
WORKERS = [
    # job 1 (a, alice): 2 GPUs, 09:00-12:00 -> 2 h in the window x 2 = 4 GPU-h
    WorkerSpan(1, "a", "alice", "n1", (0, 1), 1.0, at(9), at(12)),
    # job 2 (b, bob): half of GPU 2 from 13:00, still running -> 1 h x 0.5 = 0.5 GPU-h
    WorkerSpan(2, "b", "bob", "n1", (2,), 0.5, at(13), None),
    # job 3 (a, bob): 13:30-14:30, across the window's end -> 0.5 GPU-h
    WorkerSpan(3, "a", "bob", "n2", (0,), 1.0, at(13, 30), at(14, 30)),
    # job 5: finished before the window
    WorkerSpan(5, "a", "alice", "n2", (1,), 1.0, at(8), at(9)),
]
STARTS = [
    JobStart(1, "a", "alice", at(8), at(9)),  # started before the window: not counted
    JobStart(2, "b", "bob", at(12), at(13)),  # 3600 s
    JobStart(3, "a", "bob", at(13, 20), at(13, 30)),  # 600 s
    JobStart(4, "a", "alice", at(10), at(11)),  # 3600 s, no GPU worker
]
READINGS = {
    # GPU 0: 50% and 100% in the window -> 75%; energy 1.8 -> 5.4 MJ = 1 kWh; 09:30 is outside
    ("n1", 0): [Reading(at(9, 30), 0.0, 0.0), Reading(at(10, 30), 50.0, 1.8e6), Reading(at(11, 30), 100.0, 5.4e6)],
    # GPU 1 of n1: no readings -> unknown
    # GPU 2: 40%, 60% -> 50%; energy 0.72 MJ x 0.5 share = 0.1 kWh; 14:30 is outside
    ("n1", 2): [Reading(at(13, 10), 40.0, 1.0e6), Reading(at(13, 20), 60.0, 1.72e6), Reading(at(14, 30), 0, 9e9)],
    # n2 GPU 0: 20% -> 0.1 used; one energy reading gives no delta
    ("n2", 0): [Reading(at(13, 40), 20.0, 7.0)],
}


def test_by_project() -> None:
    a, b = compute(WORKERS, STARTS, READINGS, SINCE, UNTIL, NOW, GroupBy.PROJECT)
    assert a.key == "a" and b.key == "b"
    assert a.gpu_hours == pytest.approx(4.5)
    assert a.used_gpu_hours == pytest.approx(1.5 + 0.1)
    assert a.covered_gpu_hours == pytest.approx(2.5)
    assert a.coverage == pytest.approx(2.5 / 4.5)
    assert a.energy_kwh == pytest.approx(1.0)
    assert (a.queue.count, a.queue.mean_s, a.queue.p50_s, a.queue.p95_s, a.queue.max_s) == (2, 2100, 600, 3600, 3600)
    assert b.gpu_hours == pytest.approx(0.5)
    assert b.used_gpu_hours == pytest.approx(0.25)
    assert b.coverage == pytest.approx(1.0)
    assert b.energy_kwh == pytest.approx(0.1)
    assert (b.queue.count, b.queue.mean_s, b.queue.max_s) == (1, 3600, 3600)


def test_by_user_and_job() -> None:
    alice, bob = compute(WORKERS, STARTS, READINGS, SINCE, UNTIL, NOW, GroupBy.USER)
    assert (alice.key, alice.gpu_hours, alice.used_gpu_hours) == ("alice", pytest.approx(4.0), pytest.approx(1.5))
    assert (bob.gpu_hours, bob.used_gpu_hours, bob.energy_kwh) == (
        pytest.approx(1.0),
        pytest.approx(0.35),
        pytest.approx(0.1),
    )
    assert alice.queue.count == 1 and bob.queue.count == 2
    jobs = compute(WORKERS, STARTS, READINGS, SINCE, UNTIL, NOW, GroupBy.JOB)
    assert [j.key for j in jobs] == ["1", "2", "3", "4"]
    assert jobs[3].gpu_hours == 0 and jobs[3].coverage is None and jobs[3].queue.count == 1


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 50) == 10 and percentile(values, 95) == 19 and percentile(values, 100) == 20


def test_a_minute_aggregate_counts_for_any_interval_it_overlaps() -> None:
    w = WorkerSpan(7, "a", "alice", "n1", (0,), 1.0, at(10, 0) + timedelta(seconds=30), at(10, 2))
    minutes = {
        ("n1", 0): [
            Reading(at(9, 59), 100.0, 0.0, 60.0),  # ends before the worker starts
            Reading(at(10, 0), 20.0, 3.6e6, 60.0),  # overlaps the start
            Reading(at(10, 1), 40.0, 7.2e6, 60.0),
        ]
    }
    (g,) = compute([w], [], minutes, SINCE, UNTIL, NOW, GroupBy.JOB)
    assert g.gpu_hours == pytest.approx(90 / 3600)
    assert g.used_gpu_hours == pytest.approx(90 / 3600 * 0.3)
    assert g.energy_kwh == pytest.approx(1.0) and g.coverage == 1.0

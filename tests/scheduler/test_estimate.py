"""Start estimates replay expected ends through the same scheduler function."""

from __future__ import annotations

from datetime import timedelta

from gpupool.scheduler.estimate import estimate_start
from tests.support.builders import T0, node, pending, running, snapshot


def test_a_job_that_fits_now_starts_now() -> None:
    assert estimate_start(snapshot([node("n1")], [pending(1)]), 1) == T0


def test_waits_for_the_running_job_in_its_way_to_use_its_max_runtime() -> None:
    snap = snapshot([node("n1", 4)], [pending(1, gpus=4)], [running(9, ("n1", (0, 1)), max_runtime_s=3600)])
    assert estimate_start(snap, 1) == T0 + timedelta(hours=1)


def test_a_gang_waits_for_both_nodes() -> None:
    held = [running(8, ("n1", (0, 1, 2, 3)), max_runtime_s=3600), running(9, ("n2", (0, 1, 2, 3)), max_runtime_s=7200)]
    snap = snapshot([node("n1"), node("n2")], [pending(1, gpus=4, workers=2)], held)
    assert estimate_start(snap, 1) == T0 + timedelta(hours=2)


def test_jobs_ahead_in_line_go_first_and_their_runtime_counts() -> None:
    held = [running(9, ("n1", (0, 1, 2, 3)), max_runtime_s=600)]
    queue = [pending(1, gpus=4, max_runtime_s=1800), pending(2, gpus=4)]
    snap = snapshot([node("n1")], queue, held)
    assert estimate_start(snap, 1) == T0 + timedelta(minutes=10)
    assert estimate_start(snap, 2) == T0 + timedelta(minutes=40)


def test_no_estimate_when_the_jobs_in_the_way_have_no_max_runtime() -> None:
    snap = snapshot([node("n1", 4)], [pending(1, gpus=4)], [running(9, ("n1", (0,)))])
    assert estimate_start(snap, 1) is None

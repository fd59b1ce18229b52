"""The controller's rest between cycles (controller/loop.py ``rest_after``): short after work
moved, backing off while jobs wait that nothing can start, never past the interval."""

from __future__ import annotations

import pytest

from gpupool.controller.loop import SATURATED_DOUBLINGS, SATURATED_REST_S, rest_after


def test_a_cycle_that_moved_work_rests_a_quarter_of_its_time() -> None:
    assert rest_after(0.02, moved=True, waiting=True, fruitless=0, interval_s=0.5) == pytest.approx(0.005)


def test_fruitless_cycles_while_jobs_wait_double_the_rest_up_to_a_cap() -> None:
    rests = [rest_after(0.001, False, True, n, interval_s=10.0) for n in range(1, SATURATED_DOUBLINGS + 4)]
    expected = [SATURATED_REST_S * 2 ** min(n, SATURATED_DOUBLINGS) for n in range(len(rests))]
    assert rests == pytest.approx(expected)
    assert rests[0] == SATURATED_REST_S and rests[-1] == SATURATED_REST_S * 2**SATURATED_DOUBLINGS


def test_the_rest_never_passes_the_interval_and_an_idle_queue_rests_only_for_cost() -> None:
    assert rest_after(0.001, False, True, 50, interval_s=0.1) == 0.1
    assert rest_after(3.0, True, True, 0, interval_s=0.5) == 0.5
    assert rest_after(0.01, False, False, 0, interval_s=0.5) == pytest.approx(0.02)
    assert rest_after(0.2, False, True, 1, interval_s=0.5) == pytest.approx(0.4)  # twice its cost beats the floor

"""The controller's step runner (controller/runner.py, issue 31): the one failure guard and the
intervals, on a fake monotonic clock; and the table of steps the controller runs."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import pytest

from gpupool.controller.runner import StepRunner


@dataclass
class Chore:
    name: str
    every_s: float = 0.0
    fails: bool = False
    moves: bool = False
    ran_at: list[float] = field(default_factory=list)

    def run(self, now: float) -> bool:
        self.ran_at.append(now)
        if self.fails:
            raise RuntimeError(f"{self.name} broke")
        return self.moves


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_step_is_logged_and_the_steps_after_it_still_run(caplog: pytest.LogCaptureFixture) -> None:
    first, broken, last = Chore("first"), Chore("broken", fails=True), Chore("last", moves=True)
    runner = StepRunner([first, broken, last], Clock())
    with caplog.at_level(logging.ERROR, logger="gpupool.controller"):
        assert runner.run() is True  # the last step moved work along, whatever broke before it
        assert runner.run() is True
    assert len(first.ran_at) == len(broken.ran_at) == len(last.ran_at) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "controller step 'broken' failed; trying again at its next round"
    ] * 2


def test_intervals_are_honoured_on_the_runners_clock() -> None:
    clock = Clock()
    every, slow, once = Chore("every"), Chore("slow", every_s=10.0), Chore("once", every_s=math.inf)
    runner = StepRunner([every, slow, once], clock)
    for _ in range(25):
        runner.run()
        clock.now += 1.0
    assert len(every.ran_at) == 25
    assert slow.ran_at == [1000.0, 1010.0, 1020.0]  # the first tick runs it, then every 10 s
    assert once.ran_at == [1000.0]  # an infinite interval: the first tick only


def test_a_failing_step_waits_its_interval_like_one_that_worked() -> None:
    clock = Clock()
    broken = Chore("broken", every_s=5.0, fails=True)
    runner = StepRunner([broken], clock)
    for _ in range(11):
        runner.run()
        clock.now += 1.0
    assert broken.ran_at == [1000.0, 1005.0, 1010.0]


def test_a_step_that_ran_outside_a_tick_is_due_an_interval_later() -> None:
    clock = Clock()
    nodes = Chore("nodes", every_s=3.0)
    runner = StepRunner([nodes], clock)
    runner.ran("nodes")
    clock.now += 1.0
    runner.run()
    assert nodes.ran_at == []
    clock.now += 2.0
    runner.run()
    assert nodes.ran_at == [1003.0]


def test_a_step_may_shorten_its_interval_while_it_has_more_to_do() -> None:
    clock = Clock()
    chore = Chore("prune", every_s=3600.0)
    runner = StepRunner([chore], clock)
    runner.run()
    chore.every_s = 0.0  # a full batch: the next tick goes on
    clock.now += 1.0
    runner.run()
    chore.every_s = 3600.0
    clock.now += 1.0
    runner.run()
    assert chore.ran_at == [1000.0, 1001.0]


def test_two_steps_of_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="unique names"):
        StepRunner([Chore("ports"), Chore("ports")])


def test_the_controllers_table_names_each_step_once_and_schedules_after_settling() -> None:
    from gpupool.clock import FakeClock
    from gpupool.controller.loop import ControllerSettings
    from gpupool.controller.steps import Parts, Steps
    from gpupool.scheduler import SchedulerConfig
    from gpupool.store.db import Database
    from tests.support.executor import FakeExecutor

    db = Database("sqlite://")
    parts = Parts.build(db, FakeExecutor([]), FakeClock(), SchedulerConfig(), ControllerSettings())
    names = [step.name for step in Steps(parts).rows]
    assert len(names) == len(set(names))
    order = names.index
    assert order("nodes") < order("node-alerts") < order("reap") < order("ports") < order("schedule")
    assert order("reap") < order("user-logs")
    assert order("telemetry") < order("alerts") < order("schedule") and order("telemetry") < order("idle")
    assert order("schedule") < order("ports-after-cycle")

"""The controller loop: one thread that runs the controller's steps (``controller/steps/``) at each
tick, rests between ticks (an exit's bell ends the rest), and backs off while a full cluster leaves
jobs waiting. Short transactions; no database session open while processes are launched or polled."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpupool.clock import Clock
from gpupool.controller.recovery import recover
from gpupool.controller.runner import StepRunner
from gpupool.controller.settings import ControllerSettings
from gpupool.controller.steps import Parts, Steps
from gpupool.domain.decisions import CycleResult
from gpupool.executors.base import Executor
from gpupool.scheduler import SchedulerConfig
from gpupool.store.db import Database
from gpupool.store.sealing import Sealer

__all__ = ["Controller", "ControllerSettings", "rest_after"]

log = logging.getLogger("gpupool.controller")
SATURATED_REST_S = 0.05
SATURATED_DOUBLINGS = 3  # fruitless cycles in a row double the rest up to 8 x SATURATED_REST_S


def rest_after(spent: float, moved: bool, waiting: bool, fruitless: int, interval_s: float) -> float:
    """How long the loop rests after a cycle that took ``spent`` seconds (an exit ends it sooner).

    A burst of submits into a full cluster wakes the loop at once, but a cycle that moved nothing
    rests twice as long as it took (a third of the time busy at most), so the API keeps most of
    the interpreter and the burst lands in fewer, larger cycles. A cycle that started or reaped work
    rests a quarter of its time: short jobs turn over fast. While jobs wait and the last cycle could
    start none of them (``fruitless`` such cycles in a row), the next waits at least
    SATURATED_REST_S, doubled for each further one up to SATURATED_DOUBLINGS times: a burst into a
    full cluster costs a few cycles a second, not one per submission (measured: 1.55 -> 0.3 ms of
    controller per submission). Never longer than the interval."""
    if moved:
        return min(spent / 4, interval_s)
    floor = SATURATED_REST_S * 2 ** min(max(fruitless - 1, 0), SATURATED_DOUBLINGS) if waiting else 0.0
    return min(max(2 * spent, floor), interval_s)


def _unobserved(_seconds: float) -> None:
    """The default observer: a controller nobody measures."""


class Controller:
    def __init__(
        self,
        db: Database,
        executor: Executor,
        clock: Clock,
        config: SchedulerConfig,
        settings: ControllerSettings,
        *,
        on_cycle: Callable[[float], None] = _unobserved,
        on_first_start: Callable[[float], None] = _unobserved,
        sealer: Sealer | None = None,
    ) -> None:
        """``on_cycle`` hears the seconds of each tick that scheduled; ``on_first_start`` the
        seconds a job waited from its submission to its first start (the head feeds both to
        ``/metrics``). Both are called in the loop's thread, so they must be quick and never raise."""
        self._parts = Parts.build(db, executor, clock, config, settings, on_first_start=on_first_start, sealer=sealer)
        self._applier = self._parts.applier
        self._steps = Steps(self._parts)
        self._runner = StepRunner(self._steps.rows)
        self._settings = settings
        self._wake = threading.Event()
        self._bell = threading.Event()  # an exit rang: the loop's rest ends
        self._stop = threading.Event()
        self._moved = False  # whether the last tick started, stopped or reaped anything
        self._fruitless = 0  # ticks in a row that left jobs waiting and started nothing
        self._thread: threading.Thread | None = None
        self._on_cycle = on_cycle
        self.last_cycle_s = 0.0

    def start(self) -> None:
        """Register nodes, recover from a previous run, then run the loop in a thread."""
        p = self._parts
        self._steps.nodes.sync(force=True)
        self._runner.ran(self._steps.nodes.name)
        p.monitor.settle(recover(p.db, p.executor, p.clock))
        self._thread = threading.Thread(target=self._run, name="gpupool-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._bell.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def wake(self) -> None:
        """Run a cycle now (after a submit or cancel) instead of at the next tick."""
        self._parts.shared.dirty = True
        self._wake.set()

    def rings_at_exits(self) -> None:
        """The backend will call ``exit_rang`` at every exit: from now on workers are polled
        when it rings or a second has passed, not at every tick. Told at start rather than
        learnt at the first exit, so a cluster of long jobs is not polled a dozen times a second."""
        self._steps.reap.heard_exits = True

    def exit_rang(self) -> None:
        """A worker's exit was recorded (the backend's exit doorbell): reap and run a cycle now.
        Once this is heard, workers are polled only when it rings or a second has passed (a
        supervisor killed outright cannot ring), not at every cycle."""
        self._steps.reap.heard_exits = True
        self._steps.reap.rang = True
        self._bell.set()
        self.wake()

    def tick(self) -> CycleResult | None:
        """One tick: every step that is due (``controller/steps``). Scheduling runs only when
        something changed (a submit, a cancel, an exit, a start) or a full cycle is due; exits are
        reaped every tick (or, once the backend rings at exits, when it rang or a second has
        passed). The cycle's result, or None when no cycle ran."""
        started = time.perf_counter()
        shared = self._parts.shared
        shared.new_tick()
        self._moved = self._runner.run()
        if shared.result is not None:
            self.last_cycle_s = time.perf_counter() - started
            self._on_cycle(self.last_cycle_s)
        return shared.result

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            started = time.monotonic()
            self._moved = False
            try:
                self.tick()
            except Exception:  # the runner guards each step; this guards the runner itself
                log.exception("controller tick failed; retrying")
            spent = time.monotonic() - started
            waiting = self._parts.shared.waiting
            self._fruitless = 0 if self._moved or not waiting else self._fruitless + 1
            rest = rest_after(spent, self._moved, waiting, self._fruitless, self._settings.interval_s)
            self._bell.wait(rest)  # an exit ends the rest: its GPUs are free
            self._bell.clear()
            self._wake.wait(max(0.0, self._settings.interval_s - spent))

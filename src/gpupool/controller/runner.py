"""The controller's steps and the one runner that runs them (issue 31).

Each chore of the controller (node sync, reaping, usage, pruning, telemetry, scheduling, ...) is a
``Step``: a name, how often it runs, and ``run(now) -> moved``. The runner runs them in the order of
their table (``controller/steps/__init__.py``) at each tick, skips a step whose interval has not
passed since it last ran, and holds the single failure guard: a step that raises is logged and
tried again at its next round, and the steps after it still run. A new chore is one module and one
row in the table, never another ``_last_*`` stamp and try/except in the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

log = logging.getLogger("gpupool.controller")


class Step(Protocol):
    """One chore of the controller."""

    @property
    def name(self) -> str:
        """Unique within the table: the runner keeps when each step last ran by it, and logs say it."""
        ...

    @property
    def every_s(self) -> float:
        """The least monotonic seconds between two runs (0: every tick; infinite: only at the
        first tick, which runs every step). Read before each run, so a
        step with more to do (a pruning batch that was full) may ask to run again at once."""
        ...

    def run(self, now: float) -> bool:
        """Do the chore; whether it moved work along (started, stopped or reaped something): the
        loop rests less after a tick that moved. ``now`` is the runner's monotonic time."""
        ...


class StepRunner:
    def __init__(self, steps: Sequence[Step], monotonic: Callable[[], float] = time.monotonic) -> None:
        names = [step.name for step in steps]
        if len(set(names)) != len(names):
            raise ValueError(f"controller steps must have unique names: {names}")
        self.steps = tuple(steps)
        self._monotonic = monotonic
        self._last: dict[str, float] = {}  # step name -> when it last ran (monotonic)

    def run(self) -> bool:
        """One tick: every step that is due, in table order; whether any moved work along."""
        moved = False
        for step in self.steps:
            now = self._monotonic()
            last, every_s = self._last.get(step.name), step.every_s
            if last is not None and now - last < every_s:
                continue
            self._last[step.name] = now  # before it runs: a failing step waits its interval too
            try:
                moved = step.run(now) or moved
            except Exception:
                log.exception("controller step %r failed; trying again at its next round", step.name)
        return moved

    def ran(self, name: str) -> None:
        """Say that the step ``name`` ran now outside a tick (the node sync at start): it is due again
        an interval from now."""
        self._last[name] = self._monotonic()

"""The controller's steps, in the order each tick runs them (issue 31).

To add a chore: write a module here with a class that has ``name``, ``every_s`` and
``run(now) -> moved`` (``controller/runner.py``'s ``Step``), and add one row below. The runner
gives every step the same failure guard and interval; ``Parts.shared`` carries what one step
learns to the steps after it (the nodes, the jobs touched, the GPU readings, the cycle's result).
"""

from __future__ import annotations

from gpupool.controller.runner import Step
from gpupool.controller.steps.cycle import ScheduleCycle
from gpupool.controller.steps.images import WatchImages
from gpupool.controller.steps.nodes import SyncNodes, WatchNodeAlerts
from gpupool.controller.steps.parts import Parts, Shared
from gpupool.controller.steps.power import KeepPowerBudget
from gpupool.controller.steps.pruning import PruneAudit, PruneFinished
from gpupool.controller.steps.reap import ReapAndSettle
from gpupool.controller.steps.telemetry import SampleTelemetry, WatchAlerts, WatchIdle
from gpupool.controller.steps.usage import AccrueUsage
from gpupool.controller.steps.walls import CapUserLogs, PushPorts

__all__ = ["Parts", "Shared", "Steps"]


class Steps:
    """The table's rows by name, for the loop's own calls (the start's node sync, the exit bell)."""

    def __init__(self, parts: Parts) -> None:
        self.nodes = SyncNodes(parts)  # every --node-sync (1 s): joins and deaths
        self.reap = ReapAndSettle(parts)  # every tick: exits, overdue jobs, drains, settling
        self.cycle = ScheduleCycle(parts)  # every tick, when something changed or a cycle is due
        self.rows: list[Step] = [
            self.nodes,
            WatchNodeAlerts(parts),  # after a sync that changed something
            self.reap,
            PushPorts(parts),  # after settling: ended jobs' ports are unwalled
            CapUserLogs(parts),  # after settling: ended jobs read finished
            WatchImages(parts),  # every second: workers starting in an image say where they are
            AccrueUsage(parts),  # every usage_every_s (10 s)
            PruneAudit(parts),  # every audit_prune_every_s (1 h)
            PruneFinished(parts),  # every audit_prune_every_s, at once while batches are full
            SampleTelemetry(parts),  # every --telemetry-every (5 s, clock time)
            WatchAlerts(parts),  # on each round of readings
            WatchIdle(parts),  # on each round of readings
            KeepPowerBudget(parts),  # on each round of readings, where a power budget is in force
            self.cycle,
            PushPorts(parts, name="ports-after-cycle"),  # the replicas just started are walled at once
        ]

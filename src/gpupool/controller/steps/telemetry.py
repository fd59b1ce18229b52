"""Telemetry: read every GPU when a round is due (``controller/telemetry.py``), then raise or clear
GPU alerts and track idle GPUs on that round. Three steps, so a failing alert rule does not stop
idle tracking, nor either of them the next round of readings."""

from __future__ import annotations

from gpupool.controller.steps.parts import PartsStep


class SampleTelemetry(PartsStep):
    """Every tick; the sampler keeps its own (clock) interval: --telemetry-every."""

    name = "telemetry"

    def run(self, now: float) -> bool:
        self._parts.shared.readings = self._parts.telemetry.maybe_sample()
        return False


class WatchAlerts(PartsStep):
    name = "alerts"

    def run(self, now: float) -> bool:
        if self._parts.shared.readings is not None:
            self._parts.alerts.observe(self._parts.shared.readings)
        return False


class WatchIdle(PartsStep):
    name = "idle"

    def run(self, now: float) -> bool:
        readings = self._parts.shared.readings
        if readings is not None and self._parts.idle.observe(readings):
            self._parts.shared.dirty = True  # an idle job is being preempted
        return False

"""Alerts: conditions an admin must hear about, raised and cleared by rules over what the head
already sees (GPU readings, node states).

An alert is *active* from when it is raised until its condition is gone: a GPU back below the
temperature threshold minus a margin (so a GPU hovering at the threshold does not flap), a node
back up, or an hour without a new XID error. Each raise and clear is also an event, on the node
and on the job using the GPU, and ``/metrics`` counts them.

Pure: ``evaluate`` takes the active alerts and the latest facts and returns what to raise and
what to clear; the controller stores both.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from gpupool.domain.telemetry import GpuSample


class AlertKind(enum.StrEnum):
    """Stable strings: metrics labels and scripts use them."""

    GPU_TEMPERATURE = "gpu_temperature"
    GPU_XID = "gpu_xid"
    NODE_DOWN = "node_down"


@dataclass(frozen=True, slots=True)
class AlertRules:
    temperature_c: float = 85.0
    temperature_clear_margin_c: float = 5.0
    xid_active_s: float = 3600.0  # an XID alert stays active this long after the latest XID


@dataclass(frozen=True, slots=True)
class Alert:
    """``gpu`` is None for a node alert; ``value`` is the reading behind it (degrees, XID count)."""

    kind: AlertKind
    node: str
    gpu: int | None
    message: str
    raised_at: datetime
    value: float | None = None
    job_id: int | None = None
    id: int | None = None  # set once stored
    updated_at: datetime | None = None  # the latest reading that kept it active
    cleared_at: datetime | None = None

    @property
    def key(self) -> tuple[AlertKind, str, int | None]:
        return (self.kind, self.node, self.gpu)


@dataclass(frozen=True, slots=True)
class Clear:
    alert: Alert
    message: str


@dataclass(frozen=True, slots=True)
class Verdicts:
    raised: list[Alert]
    cleared: list[Clear]
    refreshed: list[Alert]  # still active with a new reading (a further XID): stored, no new event


def evaluate_gpus(
    active: Iterable[Alert],
    samples: Iterable[GpuSample],
    holders: Mapping[tuple[str, int], int],
    xid_seen: Mapping[tuple[str, int], float],
    now: datetime,
    rules: AlertRules,
) -> Verdicts:
    """Temperature and XID alerts from a round of readings. ``holders``: the job on each held
    GPU, named in the alert so its owner hears of it too. ``xid_seen``: each GPU's XID count as
    of its previous reading (the probe's counter; it restarts from zero with the probe), so only
    new errors raise an alert."""
    by_key = {a.key: a for a in active if a.kind is not AlertKind.NODE_DOWN}
    raised: list[Alert] = []
    cleared: list[Clear] = []
    refreshed: list[Alert] = []
    for s in samples:
        where = f"GPU {s.index} of node {s.node}"
        job = holders.get((s.node, s.index))
        hot = by_key.get((AlertKind.GPU_TEMPERATURE, s.node, s.index))
        if s.temperature_c is not None:
            if hot is None and s.temperature_c >= rules.temperature_c:
                raised.append(
                    Alert(
                        AlertKind.GPU_TEMPERATURE,
                        s.node,
                        s.index,
                        f"{where} is at {s.temperature_c:.0f} °C, over the {rules.temperature_c:g} °C threshold; "
                        "check its cooling, or drain the node (gpupool drain) before it throttles or fails",
                        now,
                        s.temperature_c,
                        job,
                    )
                )
            elif hot is not None and s.temperature_c < rules.temperature_c - rules.temperature_clear_margin_c:
                cleared.append(Clear(hot, f"{where} cooled to {s.temperature_c:.0f} °C"))
        xid = by_key.get((AlertKind.GPU_XID, s.node, s.index))
        count = s.xid_errors or 0
        seen = xid_seen.get((s.node, s.index), 0.0) if xid is None else (xid.value or 0.0)
        if count > seen:
            if xid is None:
                code = f" (latest XID {s.last_xid})" if s.last_xid is not None else ""
                raised.append(
                    Alert(
                        AlertKind.GPU_XID,
                        s.node,
                        s.index,
                        f"{where} reported {count - seen:g} new XID error(s){code}; see the driver's messages "
                        "(dmesg) on the node, and drain its GPU if they repeat",
                        now,
                        float(count),
                        job,
                    )
                )
            else:
                refreshed.append(_with(xid, value=float(count), updated_at=now))
        elif xid is not None:
            last = xid.updated_at or xid.raised_at
            if count < seen:
                # The probe restarted and counts from zero: later errors are compared with that.
                refreshed.append(_with(xid, value=float(count), updated_at=last))
            if (now - last).total_seconds() >= rules.xid_active_s:
                cleared.append(Clear(xid, f"{where}: no new XID error for {rules.xid_active_s / 60:.0f} minutes"))
    return Verdicts(raised, cleared, refreshed)


def evaluate_nodes(active: Iterable[Alert], down: Mapping[str, str], now: datetime) -> Verdicts:
    """Node-down alerts. ``down``: every node that is down now, with why."""
    current = {a.node: a for a in active if a.kind is AlertKind.NODE_DOWN}
    raised = [
        Alert(
            AlertKind.NODE_DOWN,
            name,
            None,
            f"node {name} is down: {reason or 'no reason given'}; its jobs were requeued or failed",
            now,
        )
        for name, reason in sorted(down.items())
        if name not in current
    ]
    cleared = [Clear(a, f"node {name} is back") for name, a in sorted(current.items()) if name not in down]
    return Verdicts(raised, cleared, [])


def _with(alert: Alert, *, value: float, updated_at: datetime) -> Alert:
    return Alert(
        alert.kind,
        alert.node,
        alert.gpu,
        alert.message,
        alert.raised_at,
        value,
        alert.job_id,
        alert.id,
        updated_at,
    )

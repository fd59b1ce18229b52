"""GPU telemetry: what a probe reads from one GPU at one instant, and a GPU's history as the store
keeps it (recent minutes at full rate, older days as minute aggregates).

A reading the GPU does not offer is ``None``, never a made-up zero: utilisation under MIG, the
energy counter before Volta, ECC on consumer boards, XID events without the right privileges.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

GpuKey = tuple[str, int]  # (node, GPU index)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one GPU. ``energy_j`` is a counter that only grows (since the driver, or
    the simulation, started); ``xid_errors`` counts XID critical errors the probe has seen since
    it started watching, and ``last_xid`` is the code of the latest one (what DCGM reports)."""

    node: str
    index: int
    uuid: str
    time: datetime
    memory_used_mib: int
    memory_total_mib: int
    simulated: bool
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    ecc_errors: int | None = None  # volatile uncorrected ECC errors
    xid_errors: int | None = None
    last_xid: int | None = None
    power_limit_w: float | None = None  # the enforced power limit now (DCGM_FI_DEV_POWER_MGMT_LIMIT)


class Resolution(enum.StrEnum):
    RAW = "raw"  # every sample, kept for the recent window
    MINUTE = "minute"  # one aggregate per GPU per minute, kept for days
    AUTO = "auto"  # raw when raw samples still cover the asked window, else minutes


@dataclass(frozen=True, slots=True)
class TelemetryRetention:
    """How long each resolution is kept. Defaults: 15 minutes of raw samples, 7 days of minutes."""

    raw_s: float = 15 * 60.0
    minutes_s: float = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class TelemetryPoint:
    """One point of a GPU's history: a raw sample (``samples == 1``), or a minute's aggregate
    starting at ``time``: average and peak utilisation, average memory used, peak temperature,
    average power, and the energy counter at the minute's last sample."""

    node: str
    index: int
    time: datetime
    resolution: Resolution
    samples: int
    memory_used_mib: float
    memory_total_mib: int
    utilization_pct: float | None
    utilization_max_pct: float | None
    temperature_c: float | None
    power_w: float | None
    energy_j: float | None
    ecc_errors: int | None = None  # raw points only
    xid_errors: int | None = None  # raw points only
    power_limit_w: float | None = None  # the enforced limit; a minute's lowest (issue 33)

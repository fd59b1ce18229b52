"""Which power setting a job's GPUs get at launch (issue 33): the head resolves the mode, the node
only applies a setting (``LaunchRequest.gpu_power``).

The mode is the job's own (``--gpu-power``), else its project's default, else ``max``. ``efficient``
follows the GPU model's calibrated curve (``gpupool node calibrate-power``), else its family's
documented default curve (``domain.power.default_curve``), and says which in the job's events:
a job is never told it saves what nobody measured. A limit in watts outside what this GPU allows
is taken to the nearest it does (the submit already refused one outside every model's range).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import (
    MAX,
    PowerCurve,
    PowerMode,
    PowerRange,
    default_curve,
    family_range,
    parse_mode,
    resolve,
)
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store import power_curves as curve_repo
from gpupool.store import projects as project_repo
from gpupool.store.db import Database


@dataclass(frozen=True, slots=True)
class JobPower:
    """What a job's GPU gets, and the sentence its events say about it (None: nothing to say)."""

    setting: PowerSetting | None
    note: str | None = None


def gpu_range(gpu: GpuInfo) -> PowerRange:
    """What ``gpu`` allows, as it reported; its family's range where it said nothing."""
    assumed = family_range(gpu.model)
    default_w = gpu.power_default_w or assumed.default_w
    return PowerRange(
        gpu.power_min_w or min(assumed.min_w, default_w), gpu.power_max_w or max(assumed.max_w, default_w), default_w
    )


def job_mode(spec: JobSpec, project_default: str | None) -> PowerMode:
    """The job's mode, else its project's, else max (a stored text that no longer reads: max)."""
    try:
        return parse_mode(spec.gpu_power or project_default)
    except InvalidInput:
        return PowerMode(MAX)


def job_power(
    spec: JobSpec,
    project_default: str | None,
    gpu: GpuInfo | None,
    curves: Mapping[str, PowerCurve],
    max_slowdown: float,
) -> JobPower:
    """The setting for a job's GPU ``gpu`` (None: a job without GPUs, or one not known)."""
    mode = job_mode(spec, project_default)
    if gpu is None or spec.gpus == 0 or mode.kind == MAX:
        return JobPower(None)
    power = gpu_range(gpu)
    if mode.kind == "watts":
        watts = min(max(mode.watts, power.min_w), power.max_w)
        moved = "" if watts == mode.watts else f" (the nearest a {gpu.model} allows: {power.min_w}-{power.max_w} W)"
        if watts >= power.default_w:
            return JobPower(None, f"--gpu-power {mode.text}: the {gpu.model}'s default, {power.default_w} W{moved}")
        limit = PowerSetting("limit", watts)
        return JobPower(limit, f"--gpu-power {mode.text}: a {limit.text} on its GPUs{moved}")
    curve = curves.get(gpu.model) or default_curve(gpu.model, power.default_w)
    setting = resolve(mode, curve, power, max_slowdown)
    what = setting.text if setting is not None else "the GPU's default (no setting saves energy within the slowdown)"
    if curve.calibrated:
        when = f" ({curve.measured_at:%Y-%m-%d})" if curve.measured_at else ""
        source = f"the {gpu.model}'s calibration on {curve.node}{when}"
    else:
        source = f"the default curve for {gpu.model} (not calibrated: gpupool node calibrate-power)"
    return JobPower(setting, f"efficient: {what} from {source}, at most {max_slowdown:.0%} slower")


def resolve_job_power(
    spec: JobSpec,
    project_default: str | None,
    gpu: GpuInfo | None,
    curves: Mapping[str, PowerCurve],
    max_slowdown: float,
) -> PowerSetting | None:
    """The PowerSetting a job's GPU gets at launch, or None for the GPU's default."""
    return job_power(spec, project_default, gpu, curves, max_slowdown).setting


@dataclass
class LaunchPower:
    """One start's power, read once and asked per worker; its sentences become the job's events."""

    spec: JobSpec
    max_slowdown: float
    project_default: str | None = None
    gpus: dict[tuple[str, int], GpuInfo] = field(default_factory=dict)
    curves: dict[str, PowerCurve] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def load(
        cls, db: Database, spec: JobSpec, max_slowdown: float, defaults: dict[str, str | None] | None = None
    ) -> LaunchPower:
        """Reads the store only for a job with GPUs whose mode is not max. ``defaults``: the
        projects' GPU power defaults already read this cycle (read here and added when missing):
        a cycle that starts many jobs of one project reads its default once, not once a job."""
        found = cls(spec, max_slowdown)
        if spec.gpus == 0 or spec.gpu_power == MAX:
            return found
        defaults = {} if defaults is None else defaults
        if spec.gpu_power is None and spec.project in defaults:
            found.project_default = defaults[spec.project]
            if job_mode(spec, found.project_default).kind == MAX:
                return found
        with db.read() as s:
            if spec.gpu_power is None and spec.project not in defaults:
                found.project_default = defaults[spec.project] = project_repo.gpu_power_default(s, spec.project)
            if job_mode(spec, found.project_default).kind == MAX:
                return found
            found.gpus = {(n.name, g.index): g for n in node_repo.load_nodes(s) for g in n.gpus}
            found.curves = curve_repo.curves(s)
        return found

    def setting(self, placement: Placement) -> PowerSetting | None:
        gpu = self.gpus.get((placement.node, placement.gpus[0])) if placement.gpus else None
        got = job_power(self.spec, self.project_default, gpu, self.curves, self.max_slowdown)
        if got.note is not None and got.note not in self.notes:
            self.notes.append(got.note)
        return got.setting

    def record(self, db: Database, job_id: int, now: datetime) -> None:
        """The sentences said, as the job's ``power`` events."""
        if self.notes:
            with db.tx() as s:
                for note in self.notes:
                    job_repo.add_job_event(s, job_id, now, "power", note)

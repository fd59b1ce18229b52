"""Power in the simulator (issue 33): a power model per GPU model, a cluster power budget, a job
mix with power modes, energy, peak draw, money and CO2, and deferrable jobs.

The model, per GPU: an idle GPU draws ``idle_w``; a busy one draws its limit, as compute-bound
work does (on the H100 the measured draw was the limit within 1 %). A job at ``max`` runs at its
GPU's default limit (``peak_w``) at full speed; ``efficient`` at its model's curve point
(``domain.power.default_curve(...).efficient()``, the H100's measured shape scaled to ``peak_w``);
``<W>`` at that limit; any limit runs at ``domain.power.capped_speed``, so a job's run time
stretches by ``1 / speed`` and its energy per unit of work follows the curve.

The budget (``--power-budget``): each running job counts its GPUs at their limit, as the live
head's check does. A job the scheduler starts that would take the budget over starts capped to
what is free when its mode allows it (any mode but ``max``, and no lower than the curve's lowest
limit), and otherwise waits (it stays pending and is offered again at the next event). A job
larger than the whole budget starts alone, capped to the budget, so no trace deadlocks.
**This check lives here, in the replay's admission, for now**: the scheduler's own budget check
is being added (``StartJob.power_cap_w``); when it lands the replay should read the scheduler's
decision instead, so the simulator and the head keep calling the same scheduler (DESIGN).

Energy is metered from the trace's first submission to the replay's end: the pool's (idle GPUs
included) and the jobs' (their draw above idle, which is what scheduling can move). Money and
CO2: energy times a price per kWh and a carbon intensity in gCO2/kWh, each a constant
or a series (``signals.py``). A deferrable job may be released into the queue later than it was
submitted, up to ``defer_s``: at the hour whose mean signal over the job's run (its trace
duration, at most a day) is lowest, carbon if that varies, else price. Queue times still count
from the submission, so what deferring costs in waiting shows in the same figures.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import Node
from gpupool.domain.power import MAX, capped_speed, default_curve, parse_mode, parse_watts
from gpupool.sim.signals import Signal
from gpupool.sim.trace_job import TraceJob

HOUR_S = 3600.0
J_PER_KWH = 3.6e6
MIN_CAP = 200.0 / 700.0  # the curve's lowest limit, as a fraction of the default


@dataclass(frozen=True, slots=True)
class GpuPower:
    """One GPU model's power: what it draws idle, and its default (peak) limit, in watts."""

    idle_w: float
    peak_w: float


# Family defaults (idle W, default limit W); simulated GPUs are named after these. "GPU" (the
# simulator's generic model) and anything unknown get the H100's: 70 W idle, 700 W.
FAMILIES = {"H200": GpuPower(70, 700), "H100": GpuPower(70, 700), "A100": GpuPower(50, 400), "L40S": GpuPower(35, 350)}
GENERIC = GpuPower(70, 700)


def gpu_power(model: str, overrides: Mapping[str, GpuPower]) -> GpuPower:
    if model in overrides:
        return overrides[model]
    return next((p for name, p in FAMILIES.items() if name in model.upper()), GENERIC)


def parse_models(text: str | None) -> dict[str, GpuPower]:
    """``MODEL=IDLE:PEAK,...`` (watts), e.g. ``H100=70:700,A100=50:400``."""
    out: dict[str, GpuPower] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, _, watts = part.partition("=")
        idle, _, peak = watts.partition(":")
        try:
            model = GpuPower(float(idle), float(peak))
        except ValueError:
            raise InvalidInput(f"--power-model: {part.strip()!r} is not MODEL=IDLE:PEAK, e.g. H100=70:700") from None
        if not 0 <= model.idle_w < model.peak_w or not name.strip():
            raise InvalidInput(f"--power-model: {part.strip()!r} needs 0 <= idle < peak watts")
        out[name.strip()] = model
    return out


def parse_mix(text: str | None) -> dict[str, float]:
    """``max=0.5,efficient=0.3,400W=0.2``: modes and their weights (normalised); empty: all max."""
    mix: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        mode, _, weight = part.partition("=")
        try:
            share = float(weight)
        except ValueError:
            raise InvalidInput(f"--power-modes: {part.strip()!r} is not MODE=WEIGHT, e.g. efficient=0.5") from None
        if share < 0:
            raise InvalidInput(f"--power-modes: {part.strip()!r} has a negative weight")
        text_mode = parse_mode(mode).text
        mix[text_mode] = mix.get(text_mode, 0.0) + share
    total = sum(mix.values())
    if mix and total <= 0:
        raise InvalidInput("--power-modes: the weights add up to 0")
    return {m: w / total for m, w in mix.items()}


def assign_modes(jobs: Sequence[TraceJob], mix: Mapping[str, float], seed: int) -> list[TraceJob]:
    """Each GPU job gets a mode drawn from ``mix`` (seeded); an empty mix leaves every job at max."""
    if not mix:
        return list(jobs)
    rng = random.Random(seed)
    modes, weights = list(mix), list(mix.values())
    out = []
    for job in jobs:
        mode = rng.choices(modes, weights)[0]
        gpu_job = job.spec.total_gpus > 0
        out.append(replace(job, spec=replace(job.spec, gpu_power=mode)) if gpu_job and mode != MAX else job)
    return out


def parse_budget(text: str | None, nodes: Sequence[Node], models: Mapping[str, GpuPower]) -> float | None:
    """``20kW``, ``15000W`` or ``80%`` (of the cluster's peak: every GPU at its default limit)."""
    if text is None or not text.strip():
        return None
    peak = sum(gpu_power(g.model, models).peak_w for n in nodes for g in n.gpus)
    word = text.strip()
    if word.endswith("%"):
        try:
            watts = float(word[:-1]) / 100.0 * peak
        except ValueError:
            raise InvalidInput(f"--power-budget: {word!r} is not a power (20kW) or a share of peak (80%)") from None
    else:
        watts = parse_watts(word)
    idle_node = max((sum(gpu_power(g.model, models).idle_w for g in n.gpus) for n in nodes), default=0.0)
    if watts <= idle_node:
        raise InvalidInput(
            f"--power-budget {word}: {watts:,.0f} W is not above one idle node's draw ({idle_node:,.0f} W)"
        )
    return watts


@dataclass(frozen=True, slots=True)
class PowerConfig:
    """What one replay plans with; ``PowerSim`` keeps a replay's state."""

    budget_w: float | None = None
    models: Mapping[str, GpuPower] = field(default_factory=dict)
    price: Signal | None = None  # per kWh
    carbon: Signal | None = None  # gCO2 per kWh
    deferrable: frozenset[int] = frozenset()  # the replay's job ids (1-based, in trace order)
    defer_s: float = 0.0


def pick_deferrable(count: int, fraction: float, seed: int) -> frozenset[int]:
    if not 0 <= fraction <= 1:
        raise InvalidInput(f"--deferrable must be a fraction of jobs from 0 to 1 (got {fraction:g})")
    rng = random.Random(seed + 1)
    return frozenset(i for i in range(1, count + 1) if rng.random() < fraction)


@dataclass(slots=True)
class _Run:
    gpus: float
    limit_w: float  # what it counts against the budget, per GPU
    extra_w: float  # its draw above its GPUs' idle draw, all GPUs together


class PowerSim:
    """One replay's power: admissions against the budget, and energy, money and CO2 over time."""

    def __init__(self, config: PowerConfig, nodes: Sequence[Node]) -> None:
        self.config = config
        self.node_power = {n.name: gpu_power(n.gpus[0].model if n.gpus else "GPU", config.models) for n in nodes}
        self.idle_w = sum(gpu_power(g.model, config.models).idle_w for n in nodes for g in n.gpus)
        self.peak_possible_w = sum(gpu_power(g.model, config.models).peak_w for n in nodes for g in n.gpus)
        self.running: dict[int, _Run] = {}
        self.counted_w = 0.0  # running jobs' GPUs at their limits
        self.extra_w = 0.0
        self.energy_j = self.cost = self.co2_g = 0.0  # the pool's: idle GPUs included
        self.job_energy_j = self.job_cost = self.job_co2_g = 0.0  # the jobs': draw above idle
        self.peak_w = self.idle_w
        self.peak_counted_w = 0.0
        self.capped = 0  # starts capped by the budget
        self.waited: set[int] = set()  # jobs a start was refused at least once (they waited for power)

    def release(self, job_id: int, job: TraceJob) -> float:
        """When a job enters the queue: its submission, or for a deferrable job the best hour."""
        cfg, signal = self.config, self._steering()
        if job_id not in cfg.deferrable or signal is None or cfg.defer_s <= 0:
            return job.submit_time
        length = min(job.duration or HOUR_S, 24 * HOUR_S)
        first = job.submit_time
        candidates = [first]
        boundary = (first // HOUR_S + 1) * HOUR_S
        while boundary <= first + cfg.defer_s:
            candidates.append(boundary)
            boundary += HOUR_S
        return min(candidates, key=lambda t: (signal.integral(t, t + length) / length, t))

    def _steering(self) -> Signal | None:
        for signal in (self.config.carbon, self.config.price):
            if signal is not None and signal.varies:
                return signal
        return None

    def admit(self, job_id: int, spec: JobSpec, placements: Sequence[Placement]) -> float | None:
        """The speed the job runs at (1: full), or None: it waits for power."""
        gpus = spec.total_gpus
        if gpus <= 0:
            self.running[job_id] = _Run(0.0, 0.0, 0.0)
            return 1.0
        model = self.node_power.get(placements[0].node, GENERIC) if placements else GENERIC
        mode = parse_mode(spec.gpu_power)
        limit, speed = model.peak_w, 1.0
        if mode.kind == "efficient":
            point = default_curve("GPU", round(model.peak_w)).efficient()  # limit points only
            limit, speed = float(point.setting.value), point.speed
        elif mode.kind == "watts" and mode.watts < model.peak_w:
            limit, speed = float(mode.watts), capped_speed(mode.watts, model.peak_w)
        budget = self.config.budget_w
        if budget is not None and self.counted_w + gpus * limit > budget + 1e-6:
            free = (budget - self.counted_w) / gpus
            alone = not self.running or self.counted_w <= 0
            if alone:
                free = budget / gpus
            elif not mode.flexible or free < MIN_CAP * model.peak_w:
                self.waited.add(job_id)
                return None
            limit, speed = free, capped_speed(free, model.peak_w)
            self.capped += 1
        self.running[job_id] = _Run(gpus, limit, gpus * max(0.0, limit - model.idle_w))
        self.counted_w += gpus * limit
        self.extra_w += gpus * max(0.0, limit - model.idle_w)
        self.peak_counted_w = max(self.peak_counted_w, self.counted_w)
        self.peak_w = max(self.peak_w, self.idle_w + self.extra_w)
        return speed

    def stop(self, job_id: int) -> None:
        run = self.running.pop(job_id, None)
        if run is not None:
            self.counted_w -= run.gpus * run.limit_w
            self.extra_w -= run.extra_w

    def account(self, t0: float, t1: float) -> None:
        if t1 <= t0:
            return
        watts, extra = self.idle_w + self.extra_w, self.extra_w
        self.energy_j += watts * (t1 - t0)
        self.job_energy_j += extra * (t1 - t0)
        if self.config.price is not None:
            price = self.config.price.integral(t0, t1) / J_PER_KWH
            self.cost += watts * price
            self.job_cost += extra * price
        if self.config.carbon is not None:
            carbon = self.config.carbon.integral(t0, t1) / J_PER_KWH
            self.co2_g += watts * carbon
            self.job_co2_g += extra * carbon

    def figures(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "energy_kwh": self.energy_j / J_PER_KWH,
            "peak_kw": self.peak_w / 1000.0,
            "peak_budget_kw": self.peak_counted_w / 1000.0,
            "power_budget_kw": None if cfg.budget_w is None else cfg.budget_w / 1000.0,
            "cluster_peak_kw": self.peak_possible_w / 1000.0,
            "power_capped_starts": self.capped,
            "power_waited_jobs": len(self.waited),
            "energy_cost": None if cfg.price is None else self.cost,
            "co2_kg": None if cfg.carbon is None else self.co2_g / 1000.0,
            # The jobs' part (draw above idle): what scheduling moves. Over a common span the
            # pool's idle part is the same whatever runs when, so comparisons read these.
            "job_energy_kwh": self.job_energy_j / J_PER_KWH,
            "job_energy_cost": None if cfg.price is None else self.job_cost,
            "job_co2_kg": None if cfg.carbon is None else self.job_co2_g / 1000.0,
        }

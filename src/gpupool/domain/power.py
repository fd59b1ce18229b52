"""GPU power (issue 33): what a job may draw, what ``efficient`` means, and how a GPU under a cap
behaves. Pure: the node applies settings (``node/gpu``), the head resolves modes and keeps the
budget, the simulator plans with the same curves.

A **mode** is what a person asks for (``--gpu-power max|efficient|<W>``). A **setting** is what a
node applies to one GPU: a power limit in watts, or locked SM clocks in MHz (``PowerSetting``, in
``domain/launch.py`` since it crosses to the node). A **curve** is what calibration measured on one
GPU model: for each setting, the speed and the energy per unit of work relative to the default
(``max``); ``efficient`` is the point with the least energy whose slowdown is at most
``max_slowdown``. Until a model is calibrated, its family's documented default curve stands in
(``default_curve``), shaped like the one measured on an H100 (``../shared/MACHINE-FACTS.md``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from gpupool.domain.errors import InvalidInput
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo

MAX: Literal["max"] = "max"
EFFICIENT: Literal["efficient"] = "efficient"
DEFAULT_MAX_SLOWDOWN = 0.20  # efficient: at most this much slower than max
MAX_WATTS = 5000  # no GPU draws more (a bound on input, not a GPU's range)
_WATTS = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>w|kw)?$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PowerMode:
    """``max`` (the GPU's default limit), ``efficient`` (its calibrated point) or a limit in watts."""

    kind: Literal["max", "efficient", "watts"]
    watts: int = 0  # with kind "watts"

    @property
    def text(self) -> str:
        """The form stored and shown: ``max``, ``efficient``, ``400W``."""
        return f"{self.watts}W" if self.kind == "watts" else self.kind

    @property
    def flexible(self) -> bool:
        """Whether the budget may start it capped lower than asked (``max`` never is)."""
        return self.kind != MAX


def parse_mode(text: str | None) -> PowerMode:
    """``max``, ``efficient``, ``400``, ``400W``, ``0.4kW``; InvalidInput otherwise. None: ``max``."""
    if text is None:
        return PowerMode(MAX)
    word = str(text).strip().lower()
    if word in (MAX, EFFICIENT):
        return PowerMode(MAX if word == MAX else EFFICIENT)
    found = _WATTS.match(word)
    if found is None:
        raise InvalidInput(f"--gpu-power: {str(text)[:40]!r} is not max, efficient or a power such as 400W")
    watts = float(found["n"]) * (1000 if (found["unit"] or "").lower() == "kw" else 1)
    if not 1 <= watts <= MAX_WATTS:
        raise InvalidInput(f"--gpu-power: {watts:g} W is out of range (1 to {MAX_WATTS} W; the GPU's own range too)")
    return PowerMode("watts", round(watts))


@dataclass(frozen=True, slots=True)
class PowerRange:
    """What a GPU allows (NVML's power-limit constraints and default limit), in watts."""

    min_w: int
    max_w: int
    default_w: int

    def check(self, watts: int, model: str) -> None:
        if not self.min_w <= watts <= self.max_w:
            raise InvalidInput(
                f"--gpu-power {watts}W is outside what a {model} allows: {self.min_w}-{self.max_w} W",
                code="power_out_of_range",
            )


@dataclass(frozen=True, slots=True)
class PowerPoint:
    """One setting of a curve, relative to the GPU's default (max = speed 1, energy 1)."""

    setting: PowerSetting
    speed: float  # work per second, relative to max
    energy: float  # joules per unit of work, relative to max
    watts: float  # mean draw under compute-bound work


@dataclass(frozen=True, slots=True)
class PowerCurve:
    """A GPU model's curve: measured by ``gpupool node calibrate-power``, or a family default."""

    model: str
    points: tuple[PowerPoint, ...]  # the first is max (speed 1, energy 1)
    calibrated: bool
    measured_at: datetime | None = None
    node: str | None = None  # where it was measured

    def efficient(self, max_slowdown: float = DEFAULT_MAX_SLOWDOWN) -> PowerPoint:
        """The point with the least energy per unit of work at most ``max_slowdown`` slower than max."""
        allowed = [p for p in self.points if p.speed >= 1.0 - max_slowdown - 1e-9]
        return min(allowed or self.points[:1], key=lambda p: (p.energy, -p.speed))


# The H100 SXM (700 W default) as measured on 2026-11-27 (MACHINE-FACTS): bf16 matmul, 8 s a setting.
# (setting kind, value, speed, energy, mean W)
_H100 = (
    ("limit", 700, 1.000, 1.000, 700.0),
    ("limit", 500, 0.831, 0.864, 503.0),
    ("limit", 400, 0.689, 0.831, 400.0),
    ("limit", 300, 0.468, 0.916, 301.0),
    ("limit", 200, 0.258, 1.111, 201.0),
    ("clocks", 1200, 0.875, 0.877, 538.0),
    ("clocks", 900, 0.765, 0.812, 435.0),
)


def default_curve(model: str, default_w: int) -> PowerCurve:
    """The documented default for a model family until it is calibrated: the H100's shape (speed
    and energy against the limit as a fraction of the default), scaled to this GPU's default limit;
    clock points only for the H100/H200 family, where they were measured."""
    hopper = any(name in model.upper() for name in ("H100", "H200"))
    points = []
    for kind, value, speed, energy, watts in _H100:
        if kind == "clocks" and not hopper:
            continue
        scale = default_w / 700.0
        scaled = value if kind == "clocks" else round(value * scale)
        points.append(PowerPoint(PowerSetting(kind, scaled), speed, energy, round(watts * scale, 1)))  # type: ignore[arg-type]
    return PowerCurve(model, tuple(points), calibrated=False)


def family_range(model: str) -> PowerRange:
    """The power range assumed for a model whose GPU reported none (and a simulated GPU's), by its
    family's name: from its lowest limit to its default, which is also its highest."""
    _, default_w, _, low_w = _family(model)
    return PowerRange(low_w, default_w, default_w)


def check_cluster_watts(text: str | None, gpus: Iterable[GpuInfo]) -> None:
    """Refuse at submit a limit in watts that no GPU a job may get allows (a 4xx naming the
    ranges). A model that reported no range is not judged here: its node takes the limit to the
    nearest it allows and says so."""
    if text is None or not text.endswith("W"):
        return
    watts = parse_mode(text).watts
    ranges: dict[str, tuple[int, int]] = {}
    for gpu in gpus:
        if gpu.power_min_w is None or gpu.power_max_w is None:
            return
        ranges[gpu.model] = (gpu.power_min_w, gpu.power_max_w)
    if ranges and not any(low <= watts <= high for low, high in ranges.values()):
        allowed = "; ".join(f"{model} {low}-{high} W" for model, (low, high) in sorted(ranges.items()))
        raise InvalidInput(
            f"--gpu-power {watts}W is outside what the GPUs here allow: {allowed}", code="power_out_of_range"
        )


def capped_speed(limit_w: float, default_w: float) -> float:
    """How fast compute-bound work runs under a limit, relative to the default: the H100 curve's
    shape, interpolated (a simulated GPU, and the simulator, use it)."""
    frac = max(0.0, min(1.0, limit_w / default_w))
    shape = sorted((value / 700.0, speed) for kind, value, speed, _, _ in _H100 if kind == "limit")
    if frac <= shape[0][0]:
        return shape[0][1] * frac / shape[0][0]
    for (x0, y0), (x1, y1) in itertools.pairwise(shape):
        if frac <= x1:
            return y0 + (y1 - y0) * (frac - x0) / (x1 - x0)
    return 1.0


def shared_setting(settings: list[PowerSetting | None]) -> PowerSetting | None:
    """What a GPU shared by several jobs runs at: the setting all of them allow, the highest. Any
    job at ``max`` (None) keeps the default; limits beat clock locks (a lock caps every job)."""
    if not settings or any(s is None for s in settings):
        return None
    limits = [s for s in settings if s is not None and s.kind == "limit"]
    if limits:
        return max(limits, key=lambda s: s.value)
    return max((s for s in settings if s is not None), key=lambda s: s.value)


def resolve(mode: PowerMode, curve: PowerCurve, power: PowerRange, max_slowdown: float) -> PowerSetting | None:
    """The setting a job's GPU gets for its mode: None for max (the GPU's default)."""
    if mode.kind == MAX:
        return None
    if mode.kind == "watts":
        power.check(mode.watts, curve.model)
        return None if mode.watts >= power.default_w else PowerSetting("limit", mode.watts)
    point = curve.efficient(max_slowdown)
    return None if point.speed >= 1.0 and point.energy >= 1.0 else point.setting


def budget_watts(setting: PowerSetting | None, curve: PowerCurve, power: PowerRange) -> float:
    """What a GPU counts against a power budget under ``setting``: its limit, or for a clock lock
    the draw calibration measured there (a lock bounds clocks, not watts)."""
    if setting is None:
        return float(power.default_w)
    if setting.kind == "limit":
        return float(setting.value)
    for point in curve.points:
        if point.setting == setting:
            return point.watts
    return float(power.default_w)


def parse_watts(text: str, what: str = "--power-budget") -> float:
    """``20kW``, ``1500W``, ``1500``: watts; InvalidInput otherwise. 0: no budget."""
    found = _WATTS.match(str(text).strip())
    if found is None:
        raise InvalidInput(f"{what}: {str(text)[:40]!r} is not a power such as 20kW or 1500W")
    return float(found["n"]) * (1000 if (found["unit"] or "").lower() == "kw" else 1)


# (model name part, default limit W, idle draw W, lowest limit W) by family, the first match wins:
# what is assumed of a GPU that does not say its own range (for a budget, a mode's range, a
# calibration), and what simulated GPUs are (``node/gpu/simulated.py``). The one table of it.
_FAMILIES = (("H200", 700, 75.0, 200), ("H100", 700, 70.0, 200), ("A100", 400, 55.0, 114), ("V100", 300, 40.0, 86))
_OTHER_FAMILY = ("", 300, 35.0, 86)  # lowest limits: 2/7 of the default, as the H100 measured (200 of 700 W)


def _family(model: str) -> tuple[str, int, float, int]:
    upper = model.upper()
    return next((f for f in _FAMILIES if f[0] in upper), _OTHER_FAMILY)


def default_limit_w(model: str) -> int:
    """A GPU model's default power limit when the GPU does not say it: 700 W for H100/H200, 400 W
    for A100, 300 W otherwise (what a budget counts a GPU at ``max`` at)."""
    return _family(model)[1]


def idle_w(model: str) -> float:
    """What an idle GPU of this model draws, as the simulated GPUs model it: a budget counts an
    idle GPU at this, since it draws it whatever the scheduler does."""
    return _family(model)[2]


def min_limit_w(model: str) -> int:
    """The lowest limit a GPU of this model takes when it does not say its own (NVML's minimum)."""
    return _family(model)[3]


def show_watts(watts: float) -> str:
    """``600 W``, ``1.4 kW``, ``20 kW``: as a person reads a budget."""
    if abs(watts) < 1000:
        return f"{round(watts):d} W"
    return f"{round(watts / 1000.0, 2):g} kW"


def read_budget(_knob: object, text: str) -> float:
    """``gpupool up --power-budget`` as the knobs table reads it: watts; 0 (the default) for none."""
    return parse_watts(text)

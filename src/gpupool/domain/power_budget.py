"""What a power budget counts (issue 33): each GPU at the limit its job launched it with, an idle
GPU at its idle draw. Pure: the scheduler admits jobs against it, the controller's throttle and
``/metrics`` report it, and each reads the same numbers.

A budget counts limits, not draw: a job's GPUs may draw up to their limit whenever its work
peaks, so a budget kept on limits is kept at every instant. Measured draw, which is usually
lower, is the throttle's business (``controller/steps/power.py``).

Counted per GPU (``gpu_watts``): at ``max`` (no setting) the GPU's default limit, under a limit
that limit, under a clock lock what its curve measured there (a lock bounds clocks, not watts);
the curve is the calibrated one in the budget, else the family's default (``default_curve``). A
GPU that does not say its range counts at its family's (``default_limit_w``, ``min_limit_w``).
A GPU shared by jobs counts once, at the setting they share (``shared_setting``). Only GPUs count:
CPUs, memory and fans are the rack's margin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import Placement
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.domain.power import (
    DEFAULT_MAX_SLOWDOWN,
    PowerCurve,
    PowerRange,
    budget_watts,
    default_curve,
    default_limit_w,
    idle_w,
    min_limit_w,
    parse_mode,
    resolve,
    shared_setting,
    show_watts,
)

THROTTLED = "throttled"  # how the event of a cap the throttle applied begins: /metrics counts them
Holders = Mapping[tuple[str, int], Sequence[PowerSetting | None]]  # (node, GPU) -> its jobs' settings


@dataclass(frozen=True, slots=True)
class PowerBudget:
    """The budgets in force: the pool's (``gpupool up --power-budget``) and each node's (``gpupool
    node set-power-budget``, a rack's circuit), in watts; 0 and absent: none."""

    cluster_w: float = 0.0
    nodes_w: Mapping[str, float] = field(default_factory=dict)
    curves: Mapping[str, PowerCurve] = field(default_factory=dict)  # calibrated curves by GPU model
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN  # what ``efficient`` may cost, for jobs not yet resolved

    @property
    def active(self) -> bool:
        return self.cluster_w > 0 or any(w > 0 for w in self.nodes_w.values())

    def node_w(self, node: str) -> float:
        return self.nodes_w.get(node, 0.0)


def gpu_range(gpu: GpuInfo) -> PowerRange:
    """What the GPU allows, from what it said, else its family's figures."""
    default = gpu.power_default_w or default_limit_w(gpu.model)
    low = gpu.power_min_w or min(min_limit_w(gpu.model), default)
    return PowerRange(low, gpu.power_max_w or default, default)


def curve_of(gpu: GpuInfo, budget: PowerBudget) -> PowerCurve:
    return budget.curves.get(gpu.model) or default_curve(gpu.model, gpu_range(gpu).default_w)


def gpu_watts(setting: PowerSetting | None, gpu: GpuInfo, budget: PowerBudget) -> float:
    """What one GPU counts under ``setting`` (None: the GPU's default limit)."""
    return budget_watts(setting, curve_of(gpu, budget), gpu_range(gpu))


def mode_setting(mode: str | None, gpu: GpuInfo, budget: PowerBudget) -> PowerSetting | None:
    """The setting a job asking for ``mode`` would get on this GPU: what the scheduler counts for a
    job not started yet (the Applier resolves it again at launch, with the head's own slowdown). A
    value the GPU does not allow counts at its default: the launch refuses or clamps it."""
    try:
        return resolve(parse_mode(mode), curve_of(gpu, budget), gpu_range(gpu), budget.max_slowdown)
    except InvalidInput:
        return None


def idle_draw(node: Node) -> float:
    """What the node's GPUs draw with nothing running: a node budget below it can never be kept."""
    return sum(idle_w(g.model) for g in node.gpus)


def holders_of(
    running: Iterable[tuple[Sequence[Placement], Sequence[PowerSetting | None]]],
) -> dict[tuple[str, int], list[PowerSetting | None]]:
    """(node, GPU) -> the settings of the workers on it, from each running job's placements and
    the settings its workers launched with (aligned; a setting missing: the GPU's default)."""
    out: dict[tuple[str, int], list[PowerSetting | None]] = {}
    for placements, settings in running:
        for i, p in enumerate(placements):
            setting = settings[i] if i < len(settings) else None
            for index in p.gpus:
                out.setdefault((p.node, index), []).append(setting)
    return out


def counted_by_node(nodes: Iterable[Node], holders: Holders, budget: PowerBudget) -> dict[str, float]:
    """Watts the budget counts on each node that is not down: held GPUs at their (shared)
    setting, the others at their idle draw."""
    out: dict[str, float] = {}
    for node in nodes:
        if node.state is NodeState.DOWN:
            continue
        total = 0.0
        for gpu in node.gpus:
            settings = holders.get((node.name, gpu.index))
            if settings:
                total += gpu_watts(shared_setting(list(settings)), gpu, budget)
            else:
                total += idle_w(gpu.model)
        out[node.name] = total
    return out


def check_budget(watts: float, nodes: Iterable[Node], what: str = "--power-budget") -> None:
    """A budget below one node's GPUs' idle draw could never be kept, whatever the scheduler
    held back: refused (0: no budget)."""
    for node in nodes:
        idle = idle_draw(node)
        if 0 < watts < idle:
            raise InvalidInput(
                f"{what} {show_watts(watts)} is below what node {node.name}'s GPUs draw idle ({show_watts(idle)})",
                code="power_budget_too_low",
            )

"""The power options of ``gpupool simulate`` (issue 33): turned into a ``PowerConfig`` per replay,
and the comparisons that say what a budget costs and what deferring buys.

With ``--power-budget`` each policy is also replayed without the budget (the column
``POLICY (no budget)``), and its figures gain ``budget_jct_cost_s`` and ``budget_queue_cost_s``:
how much longer jobs took and waited on average because of the budget. With
``--deferrable-until`` it is also replayed without deferring (``POLICY (no deferral)``), and
gains ``deferral_energy_cost_saved`` and ``deferral_co2_saved_kg``, from the jobs' energy (their
draw above idle: the pool's idle draw over a common span is the same either way), and what
deferring cost in queueing, ``deferral_queue_cost_s``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer

from gpupool.domain.durations import parse_duration
from gpupool.domain.nodes import Node
from gpupool.sim import power as sim_power
from gpupool.sim.signals import parse_signal
from gpupool.sim.trace_job import TraceJob

BudgetOpt = Annotated[
    str | None,
    typer.Option(help="cluster power budget: 20kW, 15000W or 80% (of every GPU at its default limit)"),
]
ModelOpt = Annotated[
    str | None, typer.Option(help="GPU power per model, MODEL=IDLE:PEAK watts (default: H100 70:700, A100 50:400)")
]
ModesOpt = Annotated[
    str | None, typer.Option(help="the jobs' power modes, drawn by weight: max=0.5,efficient=0.5 (default: all max)")
]
PowerSeedOpt = Annotated[int, typer.Option(help="seed of the power-mode and deferrable draws")]
PriceOpt = Annotated[
    str | None, typer.Option(help="energy price per kWh: a number, or a CSV of hour,value (24 rows) or time,value")
]
CarbonOpt = Annotated[
    str | None, typer.Option(help="carbon intensity in gCO2/kWh: a number, or a CSV of hour,value or time,value")
]
DeferUntilOpt = Annotated[
    str | None, typer.Option(help="a deferrable job may wait this long for cheaper or cleaner hours (12h)")
]
DeferrableOpt = Annotated[
    float, typer.Option(help="the fraction of jobs that are deferrable (with --deferrable-until)")
]


def power_config(
    nodes: list[Node],
    job_count: int,
    budget: str | None,
    model: str | None,
    price: str | None,
    carbon: str | None,
    deferrable_until: str | None,
    deferrable: float,
    seed: int,
) -> sim_power.PowerConfig:
    models = sim_power.parse_models(model)
    defer_s = parse_duration(deferrable_until) if deferrable_until else 0.0
    return sim_power.PowerConfig(
        budget_w=sim_power.parse_budget(budget, nodes, models),
        models=models,
        price=parse_signal(price, "--energy-price"),
        carbon=parse_signal(carbon, "--carbon-intensity"),
        deferrable=sim_power.pick_deferrable(job_count, deferrable, seed) if defer_s > 0 else frozenset(),
        defer_s=defer_s,
    )


def with_modes(jobs: list[TraceJob], modes: str | None, seed: int) -> list[TraceJob]:
    return sim_power.assign_modes(jobs, sim_power.parse_mix(modes), seed)


def variants(name: str, config: sim_power.PowerConfig) -> dict[str, sim_power.PowerConfig]:
    """The replays one policy needs: as asked, and the baselines its comparisons read."""
    out = {name: config}
    if config.budget_w is not None:
        out[f"{name} (no budget)"] = replace(config, budget_w=None)
    if config.defer_s > 0:
        out[f"{name} (no deferral)"] = replace(config, deferrable=frozenset(), defer_s=0.0)
    return out


def compare(figures: dict[str, dict[str, Any]]) -> None:
    """Adds the budget's cost and deferral's gain to each policy's figures, from its baselines."""
    for name, f in figures.items():
        base = figures.get(f"{name} (no budget)")
        if base is not None:
            f["budget_jct_cost_s"] = f["avg_jct_s"] - base["avg_jct_s"]
            f["budget_queue_cost_s"] = f["avg_queue_s"] - base["avg_queue_s"]
        base = figures.get(f"{name} (no deferral)")
        if base is not None:
            f["deferral_queue_cost_s"] = f["avg_queue_s"] - base["avg_queue_s"]
            pairs = (("job_energy_cost", "deferral_energy_cost_saved"), ("job_co2_kg", "deferral_co2_saved_kg"))
            for key, saved in pairs:
                if f.get(key) is not None and base.get(key) is not None:
                    f[saved] = base[key] - f[key]

"""Quotas and limits per GPU model (issue 34 item 2): ``--quota H100=8,A100=16``, ``--limit H100=12``.

A model name is matched as ``--gpu-model`` matches it: exactly, against the model the node reports
for each GPU. A figure may be a total (``8``, as before), per-model pairs, or both (``24,H100=8``):
with no total, a quota's total is the sum of its per-model figures (what it guarantees in all) and
a limit's is none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from gpupool.domain import bounds
from gpupool.domain.errors import InvalidInput

MAX_FIGURE = 1_000_000  # projects.MAX_GPUS: that module imports this one


def parse_figures(label: str, text: str, sep: str = ",") -> tuple[float | None, dict[str, float]]:
    """``"8"`` -> (8, {}); ``"H100=8,A100=16"`` -> (None, {...}); ``"24,H100=8"`` -> (24, {H100: 8}).
    ``sep``: the simulator's projects file writes ``H100=8;A100=16``, since a comma would end its CSV cell."""
    total: float | None = None
    by_model: dict[str, float] = {}
    for part in (p.strip() for p in text.split(sep)):
        if not part:
            continue
        model, sep, value = part.rpartition("=")
        if sep and not model.strip():
            raise InvalidInput(f"--{label} {text!r}: a model name before '=' in {part!r}")
        number = _number(label, text, value)
        if not sep:
            if total is not None:
                raise InvalidInput(f"--{label} {text!r}: one total at most, then MODEL=N pairs")
            total = number
            continue
        name = model.strip()
        if name in by_model:
            raise InvalidInput(f"--{label} {text!r}: model {name} given twice")
        by_model[name] = number
    if total is None and not by_model:
        raise InvalidInput(f"--{label} {text!r}: give a number of GPUs, MODEL=N pairs (H100=8,A100=16), or both")
    return total, by_model


def _number(label: str, text: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise InvalidInput(f"--{label} {text!r}: {value.strip()!r} is not a number of GPUs") from None
    if math.isnan(number) or not 0 <= number <= MAX_FIGURE:
        raise InvalidInput(f"--{label} {text!r}: {value.strip()} must be a number from 0 to {MAX_FIGURE}")
    return number


def check(quota: float, limit: float | None, quotas: Mapping[str, float], limits: Mapping[str, float]) -> None:
    """Refuse per-model figures that contradict each other or the totals, naming the numbers."""
    for label, figures in (("quota", quotas), ("limit", limits)):
        for model, value in figures.items():
            bounds.readable("the GPU model", model, bounds.MAX_MODEL)
            if not model.strip() or "|" in model or "," in model or "=" in model:
                raise InvalidInput(f"invalid GPU model {model!r} in the per-model {label}s")
            if not isinstance(value, int | float) or math.isnan(value) or not 0 <= value <= MAX_FIGURE:
                raise InvalidInput(f"{label} {model}={value!r} must be a number from 0 to {MAX_FIGURE}")
    summed = sum(quotas.values())
    if summed > quota + 1e-9:
        raise InvalidInput(f"quota {quota:g} is below its per-model quotas' sum {summed:g} ({describe(quotas)})")
    for model, cap in limits.items():
        if cap + 1e-9 < quotas.get(model, 0.0):
            raise InvalidInput(
                f"limit {model}={cap:g} is below quota {model}={quotas[model]:g}: a project may always use its quota"
            )


def unknown_models(named: Iterable[str], models_here: Iterable[str]) -> str | None:
    """The refusal for per-model figures naming a model no node has, or None."""
    here = sorted(set(models_here))
    missing = sorted(set(named) - set(here))
    if not missing:
        return None
    return (
        f"no node has a GPU of model {', '.join(missing)}; models here: {', '.join(here) or 'none'}"
        " (a model is named as the nodes report it, as --gpu-model does)"
    )


def describe(figures: Mapping[str, float]) -> str:
    """``H100 8, A100 16``: per-model figures in name order."""
    return ", ".join(f"{m} {v:g}" for m, v in sorted(figures.items()))


def flag(figures: Mapping[str, float]) -> str:
    """``A100=16,H100=8``: the figures as the option that sets them."""
    return ",".join(f"{m}={v:g}" for m, v in sorted(figures.items()))

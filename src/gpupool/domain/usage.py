"""Recent usage for fair share: an exponential moving average of the GPUs a project holds.

Pure arithmetic so the head (on the wall clock) and the simulator (on a virtual one) decay
usage identically.
"""

from __future__ import annotations

import math


def decayed_average(previous: float, holding: float, elapsed_s: float, half_life_s: float) -> float:
    """The average after ``elapsed_s`` seconds of holding ``holding`` GPUs: the weight of the past
    halves every ``half_life_s``. A half-life of 0 means no memory: the average is what is held now."""
    if half_life_s <= 0:
        return holding
    if elapsed_s <= 0:
        return previous
    keep = math.pow(0.5, elapsed_s / half_life_s)
    return previous * keep + holding * (1.0 - keep)

"""Projects (queues): a guaranteed quota, a limit on what they may hold, a weight for the rest.

Quantities are GPUs; a fractional worker counts by its share.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpupool.domain import model_quotas
from gpupool.domain.errors import InvalidInput
from gpupool.domain.power import parse_mode

DEFAULT_PROJECT = "default"
# The one rule for names people give things: projects, users (and a job's project).
MAX_GPUS = 1_000_000  # a quota, limit or weight beyond any cluster: bounded so arithmetic stays exact
MAX_IDLE_S = 365 * 86400
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    quota: float = 0.0
    limit: float | None = None  # None: no limit beyond the cluster
    weight: float = 1.0
    # Interactive jobs whose GPUs sit idle this long are preempted while others wait (domain.idle).
    idle_timeout_s: float | None = None
    # Its jobs' GPU power mode when they name none (issue 33): "max", "efficient", "400W"; None: max.
    gpu_power: str | None = None
    # The organisational unit above it (issue 34, domain/tree.py); None: a child of the root.
    parent: str | None = None
    # GPUs of one model guaranteed, and the most of one model it may hold (issue 34 item 2,
    # domain/model_quotas.py); empty: totals only, as before. Left out of the hash: a mapping.
    quota_by_model: Mapping[str, float] = field(default_factory=dict, hash=False)
    limit_by_model: Mapping[str, float] = field(default_factory=dict, hash=False)

    @classmethod
    def create(
        cls,
        name: str,
        quota: float = 0.0,
        limit: float | None = None,
        weight: float = 1.0,
        idle_timeout_s: float | None = None,
        gpu_power: str | None = None,
        parent: str | None = None,
        quota_by_model: Mapping[str, float] | None = None,
        limit_by_model: Mapping[str, float] | None = None,
    ) -> Project:
        if not NAME_RE.match(name):
            raise InvalidInput(f"invalid project name {name!r}: letters, digits, '.', '_' and '-', at most 63")
        for label, value in (("quota", quota), ("weight", weight)):
            if not isinstance(value, int | float) or math.isnan(value) or not 0 <= value <= MAX_GPUS:
                raise InvalidInput(f"{label} must be a number from 0 to {MAX_GPUS}, got {value!r}")
        if weight == 0:
            raise InvalidInput("weight must be above 0 (it is the project's part of the GPUs beyond all quotas)")
        if limit is not None:
            if math.isnan(limit) or not 0 <= limit <= MAX_GPUS:
                raise InvalidInput(f"limit must be a number from 0 to {MAX_GPUS}, got {limit!r}")
            if limit < quota:
                raise InvalidInput(f"limit {limit:g} is below quota {quota:g}: a project may always use its quota")
        if idle_timeout_s is not None and not (math.isfinite(idle_timeout_s) and 60 <= idle_timeout_s <= MAX_IDLE_S):
            raise InvalidInput(
                "idle timeout must be from 60 seconds (readings come every few seconds) to 365 days,"
                f" got {idle_timeout_s!r}"
            )
        if parent is not None and not NAME_RE.match(parent):
            raise InvalidInput(f"invalid parent name {parent!r}: letters, digits, '.', '_' and '-', at most 63")
        if parent == name:
            raise InvalidInput(f"project {name} cannot be its own parent")
        quotas, limits = dict(quota_by_model or {}), dict(limit_by_model or {})
        model_quotas.check(quota, limit, quotas, limits)
        return cls(
            name,
            float(quota),
            None if limit is None else float(limit),
            float(weight),
            None if idle_timeout_s is None else float(idle_timeout_s),
            None if gpu_power is None else parse_mode(gpu_power).text,
            parent,
            {m: float(v) for m, v in sorted(quotas.items())},
            {m: float(v) for m, v in sorted(limits.items())},
        )

    def describe_idle_timeout(self) -> str:
        return "off" if self.idle_timeout_s is None else f"{self.idle_timeout_s:g}s"

    def describe_limit(self) -> str:
        return "none" if self.limit is None else f"{self.limit:g}"


def effective_projects(configured: list[Project], capacity: float) -> list[Project]:
    """The projects the scheduler and the API reason about. Until an admin sets it, ``default``
    is guaranteed what no other project is (the whole cluster on a fresh install), so interactive
    jobs, which must fit inside a quota, run without any set-up."""
    by_name = {p.name: p for p in configured}
    # A unit's quota holds its children's: only the top level's quotas claim the cluster.
    unclaimed = max(0.0, float(capacity) - sum(p.quota for p in configured if p.parent is None))
    by_name.setdefault(DEFAULT_PROJECT, Project(DEFAULT_PROJECT, quota=unclaimed))
    return sorted(by_name.values(), key=lambda p: p.name)

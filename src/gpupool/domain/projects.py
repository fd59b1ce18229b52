"""Projects (queues): a guaranteed quota, a limit on what they may hold, a weight for the rest.

Quantities are GPUs; a fractional worker counts by its share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpupool.domain import model_quotas
from gpupool.domain.errors import InvalidInput
from gpupool.domain.names import NAME_RE as NAME_RE

DEFAULT_PROJECT = "default"
# The one rule for names people give things: projects, users (and a job's project).
MAX_GPUS = 1_000_000  # a quota, limit or weight beyond any cluster: bounded so arithmetic stays exact
MAX_IDLE_S = 365 * 86400


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
    # GPUs one user's jobs may hold here at once (issue 34), a fractional GPU by its share; None: no
    # such limit. ``user_limits`` overrides it for the users it names, sorted by user (a tuple, so a
    # project stays hashable); None there: that user has no user limit.
    user_limit: float | None = None
    user_limits: tuple[tuple[str, float | None], ...] = ()
    # At most this many GPUs of its unused quota are lent to others (issue 34, Kueue's lendingLimit);
    # the rest stays idle for it. None: it lends all, as before.
    lend_limit: float | None = None
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
        user_limit: float | None = None,
        user_limits: Mapping[str, float | None] | None = None,
        lend_limit: float | None = None,
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
        _check_lend_limit(lend_limit, quota)
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
            None if gpu_power is None else _power_mode(gpu_power),
            parent,
            *_user_limits(name, limit, user_limit, user_limits or {}),
            None if lend_limit is None else float(lend_limit),
            {m: float(v) for m, v in sorted(quotas.items())},
            {m: float(v) for m, v in sorted(limits.items())},
        )

    @property
    def has_user_limits(self) -> bool:
        return self.user_limit is not None or bool(self.user_limits)

    def limit_for(self, user: str) -> float | None:
        """The most GPUs ``user``'s jobs may hold here at once; None: no user limit for them."""
        for name, value in self.user_limits:
            if name == user:
                return value
        return self.user_limit

    def describe_user_limits(self) -> str:
        """As ``--user-limit`` takes them: "4", "4, ann=8", "none, ann=8"; "none" when there are none."""
        return ", ".join([_show(self.user_limit), *(f"{user}={_show(value)}" for user, value in self.user_limits)])

    def describe_idle_timeout(self) -> str:
        return "off" if self.idle_timeout_s is None else f"{self.idle_timeout_s:g}s"

    def describe_limit(self) -> str:
        return "none" if self.limit is None else f"{self.limit:g}"

    def describe_lend_limit(self) -> str:
        return "all" if self.lend_limit is None else f"{self.lend_limit:g}"


def _check_lend_limit(lend_limit: float | None, quota: float) -> None:
    """0 to the quota: only unused quota is lent, so a lend limit above it would mean nothing."""
    if lend_limit is None:
        return
    if math.isnan(lend_limit) or not 0 <= lend_limit <= MAX_GPUS:
        raise InvalidInput(f"lend limit must be a number from 0 to {MAX_GPUS}, got {lend_limit!r}")
    if lend_limit > quota:
        raise InvalidInput(f"lend limit {lend_limit:g} is above quota {quota:g}: a project lends only its unused quota")


def _show(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _user_limits(
    project: str, limit: float | None, default: float | None, per_user: Mapping[str, float | None]
) -> tuple[float | None, tuple[tuple[str, float | None], ...]]:
    """The user limits, checked: numbers within bounds, users by the names rule, none above the
    project's own limit (it could never be reached, and says the admin meant something else)."""
    for user, value in [(None, default), *sorted(per_user.items())]:
        if user is not None and not NAME_RE.match(user):
            raise InvalidInput(f"invalid user name {user!r} in a user limit: letters, digits, '.', '_' and '-'")
        if value is None:
            continue
        if not isinstance(value, int | float) or math.isnan(value) or not 0 < value <= MAX_GPUS:
            raise InvalidInput(f"a user limit must be a number above 0 and at most {MAX_GPUS}, got {value!r}")
        if limit is not None and value > limit + 1e-9:
            whose = f"{user}'s user limit" if user else "a user limit"
            raise InvalidInput(f"{whose} of {value:g} is above project {project}'s limit of {limit:g}")
    pairs = tuple((user, None if value is None else float(value)) for user, value in sorted(per_user.items()))
    return (None if default is None else float(default)), pairs


def effective_projects(configured: list[Project], capacity: float) -> list[Project]:
    """The projects the scheduler and the API reason about. Until an admin sets it, ``default``
    is guaranteed what no other project is (the whole cluster on a fresh install), so interactive
    jobs, which must fit inside a quota, run without any set-up."""
    by_name = {p.name: p for p in configured}
    # A unit's quota holds its children's: only the top level's quotas claim the cluster.
    unclaimed = max(0.0, float(capacity) - sum(p.quota for p in configured if p.parent is None))
    by_name.setdefault(DEFAULT_PROJECT, Project(DEFAULT_PROJECT, quota=unclaimed))
    return sorted(by_name.values(), key=lambda p: p.name)


def parse_user_limits(given: Iterable[str]) -> tuple[float | None, dict[str, float | None]]:
    """``--user-limit`` as given, once or more: ``4`` (every user), ``ann=8`` (one user), ``none``
    or ``ann=none`` (no limit). The numbers are checked against the project by ``Project.create``."""
    default: float | None = None
    per_user: dict[str, float | None] = {}
    seen_default = False
    for text in given:
        user, _, figure = text.rpartition("=")
        user = user.strip()
        if user in per_user or (not user and seen_default):
            raise InvalidInput(f"--user-limit {user + '=' if user else ''}... is given twice: give each once")
        value = _figure(text, figure.strip())
        if user:
            per_user[user] = value
        else:
            default, seen_default = value, True
    return default, per_user


def _figure(text: str, figure: str) -> float | None:
    if figure.lower() == "none":
        return None
    try:
        return float(figure)
    except ValueError:
        raise InvalidInput(f"--user-limit {text!r}: give GPUs (4), a user's GPUs (ann=8), or none (no limit)") from None


def _power_mode(text: str) -> str:
    """``--gpu-power`` as power.py writes it. Imported here, not at the top: reading jobs (which
    import this module for NAME_RE) should not load power.py and launch.py (~12 ms of a CLI start)."""
    from gpupool.domain.power import parse_mode

    return parse_mode(text).text

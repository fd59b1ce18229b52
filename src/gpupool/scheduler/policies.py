"""Named policies, and the tables of the hooks a policy names.

A policy is a ``SchedulerConfig``: data naming the actions to run, in order, and for each
decision they leave open a hook from a table: here the queue order, the user order (whose jobs
go next within a queue), the quota check and the hold-up (what a job that cannot start holds up),
which allocate calls; in ``registry`` the job order and the placement (node score), which the
session calls. Adding a hook is a module under ``plugins/`` and a line in its table; adding a
policy, a line in ``POLICIES``; adding an action, a module under ``actions/`` and a line in
``cycle.ACTIONS``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from gpupool.domain.errors import InvalidInput
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.partition import PARTITIONS, Assign
from gpupool.scheduler.plugins import hold_up, queues, quota, users
from gpupool.scheduler.plugins.hold_up import HoldUp
from gpupool.scheduler.plugins.queues import QueueOrder
from gpupool.scheduler.plugins.quota import QuotaCheck
from gpupool.scheduler.plugins.users import UserOrder

T = TypeVar("T")

QUEUE_ORDERS: dict[str, QueueOrder] = {"fair_share": queues.FAIR_SHARE, "single": queues.SINGLE}
USER_ORDERS: dict[str, UserOrder] = {"least_used": users.LEAST_USED, "none": users.NONE}
QUOTA_CHECKS: dict[str, QuotaCheck] = {"borrow": quota.borrow, "isolated": quota.isolated}
HOLD_UPS: dict[str, HoldUp] = {
    "reserve": hold_up.reservation,
    "all": hold_up.every_queue,
    "project": hold_up.own_queue,
    "none": hold_up.nothing,
}

_FIFO_ACTIONS = ("allocate", "backfill", "reclaim", "preempt")
POLICIES: dict[str, SchedulerConfig] = {
    # Fair share between projects, priority classes, backfill behind a reservation, reclaim, preempt;
    # within a project the attained-service order (Tiresias' discretised LAS, ``plugins.las``):
    # least GPU time received first, in a few queues, a waiting job displacing running jobs of a
    # later queue within bounds.
    "default": SchedulerConfig(),
    # Every job that fits starts, in fair-share and priority order; nobody waits for anybody.
    "greedy": SchedulerConfig(actions=("allocate",), hold_up="none"),
    # One queue in submit order; the first job that does not fit holds up everything behind it.
    "fifo": SchedulerConfig(
        actions=("allocate",), job_order="fifo", queue_order="single", user_order="none", hold_up="all"
    ),
    # FIFO per project, each confined to its own nodes, sized by its quota: static partitions, as
    # Philly's virtual clusters (partition="gpus": to its quota in GPUs on any node).
    "fifo-isolated": SchedulerConfig(
        actions=("allocate",),
        job_order="fifo",
        user_order="none",
        quota_check="isolated",
        hold_up="project",
        partition="nodes",
    ),
    # The default by its order's name.
    "las": SchedulerConfig(),
    # The default before issue 18 item 5: first come first served within fair share, no displacing.
    "fifo-share": SchedulerConfig(actions=_FIFO_ACTIONS, job_order="priority_fifo"),
    # Shortest remaining time first with the durations known: the bound for ``las``, for the
    # simulator only (``SIM_ONLY``: the head knows no durations).
    "srtf-oracle": SchedulerConfig(job_order="srtf_oracle", user_order="none"),
}
# Policies that read what only a replayed trace knows: the head refuses them.
SIM_ONLY = frozenset({"srtf-oracle"})


@dataclass(frozen=True, slots=True)
class Hooks:
    """The hooks a configuration names, looked up once per cycle."""

    queue_order: QueueOrder
    quota_check: QuotaCheck
    hold_up: HoldUp
    user_order: UserOrder
    partition: Assign | None


def hooks(config: SchedulerConfig) -> Hooks:
    return Hooks(
        _lookup(QUEUE_ORDERS, config.queue_order, "queue order"),
        _lookup(QUOTA_CHECKS, config.quota_check, "quota check"),
        _lookup(HOLD_UPS, config.hold_up, "hold-up"),
        _lookup(USER_ORDERS, config.user_order, "user order"),
        _lookup(PARTITIONS, config.partition, "partition"),
    )


def preset(name: str, *, placement: str | None = None, partition: str | None = None) -> SchedulerConfig:
    """The named policy, with another placement plugin and partition if given. Only a policy
    that isolates projects has partitions: ``nodes`` for another one is refused, not ignored."""
    config = _lookup(POLICIES, name, "policy")
    if placement is not None:
        config = replace(config, placement=placement)
    if partition is not None:
        _lookup(PARTITIONS, partition, "partition")
        if partition != config.partition and config.quota_check != "isolated":
            raise InvalidInput(
                f"partition {partition!r} applies only to a policy that isolates projects "
                f"(fifo-isolated), not to {name!r}"
            )
        config = replace(config, partition=partition)
    return config


def for_head(name: str, *, placement: str | None = None, partition: str | None = None) -> SchedulerConfig:
    """``preset`` for the head: a policy that reads what only a replayed trace knows is refused."""
    if name in SIM_ONLY:
        live = ", ".join(n for n in POLICIES if n not in SIM_ONLY)
        raise InvalidInput(
            f"policy {name!r} reads job durations, which only a simulated trace knows: use it with "
            f"gpupool simulate; the head runs one of {live}"
        )
    return preset(name, placement=placement, partition=partition)


def _lookup(table: dict[str, T], name: str, what: str) -> T:
    try:
        return table[name]
    except KeyError:
        raise InvalidInput(f"unknown {what} {name!r}: use one of {', '.join(table)}") from None

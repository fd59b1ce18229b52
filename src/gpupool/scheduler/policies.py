"""Named policies.

A policy is a ``SchedulerConfig``: data naming the actions to run, in order, and for each
decision they leave open a hook (``hooks``) by its name in a table of ``registry``: the job
order, the placement, the queue order, the user order (whose jobs go next within a queue), the
quota check and the blocking (what a job that cannot start blocks). Adding a policy is a line in
``POLICIES``."""

from __future__ import annotations

from dataclasses import replace

from gpupool.domain.errors import InvalidInput
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.registry import PARTITIONS, lookup

_FIFO_ACTIONS = ("allocate", "backfill", "shrink", "reclaim", "preempt", "grow")
POLICIES: dict[str, SchedulerConfig] = {
    # Fair share between projects, priority classes, backfill behind a reservation, reclaim, preempt;
    # within a project the least-attained order (Tiresias' discretised LAS, ``plugins.las``):
    # least GPU time received first, in a few queues, a waiting job displacing running jobs of a
    # later queue within bounds.
    "default": SchedulerConfig(),
    # Every job that fits starts, in fair-share and priority order; nobody waits for anybody.
    "greedy": SchedulerConfig(actions=("allocate",), blocking="none"),
    # One queue in submit order; the first job that does not fit blocks everything behind it.
    "fifo": SchedulerConfig(
        actions=("allocate",), job_order="fifo", queue_order="single", user_order="none", blocking="all"
    ),
    # FIFO per project, each confined to its own nodes, sized by its quota: static partitions, as
    # Philly's virtual clusters (partition="gpus": to its quota in GPUs on any node).
    "fifo-isolated": SchedulerConfig(
        actions=("allocate",),
        job_order="fifo",
        user_order="none",
        quota_check="isolated",
        blocking="project",
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


def preset(name: str, *, placement: str | None = None, partition: str | None = None) -> SchedulerConfig:
    """The named policy, with another placement plugin and partition if given. Only a policy
    that isolates projects has partitions: ``nodes`` for another one is refused, not ignored."""
    config = lookup(POLICIES, name, "policy")
    if placement is not None:
        config = replace(config, placement=placement)
    if partition is not None:
        lookup(PARTITIONS, partition, "partition")
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

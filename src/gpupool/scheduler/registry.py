"""The one place the built-in plugins are registered: a table per hook, from the names a
configuration gives to the plugins that implement them, and ``hooks``, which looks up a
configuration's names once per cycle.

The hook types live in ``hooks`` (below the plugins and the session); the plugins under
``plugins/``. Adding a plugin is a module there and a line in its table here; adding a policy, a
line in ``policies.POLICIES``; adding an action, a module under ``actions/`` and a line in
``cycle.ACTIONS``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from gpupool.domain.errors import InvalidInput
from gpupool.scheduler import partition
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.hooks import (
    Assign,
    Blocking,
    Hooks,
    JobOrder,
    OpenNodePenalty,
    PlacementPlugin,
    PreemptiveOrder,
    QueueOrder,
    QuotaCheck,
    UserOrder,
)
from gpupool.scheduler.plugins import (
    binpack,
    blocking,
    frag,
    las,
    order,
    queues,
    quota,
    replicas,
    spread,
    srtf,
    topology,
    users,
)
from gpupool.scheduler.session import Session

T = TypeVar("T")


def _frag_for_pool(workers: Iterable[tuple[WorkerDemand, int]], last: object | None) -> PlacementPlugin:
    plugin = frag.for_pool(workers, last if isinstance(last, frag.FragPlacement) else None)
    return PlacementPlugin(plugin.score, True, first_bucket_wins=False, choose=plugin.choose, learned=plugin)


PLACEMENTS: dict[str, PlacementPlugin] = {
    "binpack": PlacementPlugin(binpack.score, fewest_free_first=True, shares_first=True),
    "spread": PlacementPlugin(spread.score, fewest_free_first=False),
    "topology": PlacementPlugin(topology.score, True, first_bucket_wins=False, pick_gpus=topology.pick_gpus),
    # Fragmentation is not ordered by free GPUs: ``choose`` scores each distinct node key instead.
    "frag": PlacementPlugin(
        frag.DEFAULT.score, True, first_bucket_wins=False, choose=frag.DEFAULT.choose, for_pool=_frag_for_pool
    ),
}
# Node penalties every configuration gets, in front of its placement's score.
NODE_PENALTIES: tuple[OpenNodePenalty[Session], ...] = (replicas.spread,)
JOB_ORDERS: dict[str, JobOrder] = {"priority_fifo": order.priority_fifo, "fifo": order.fifo}
# Job orders that depend on the configuration and rank running jobs too (``hooks.PreemptiveOrder``).
PREEMPTIVE: dict[str, PreemptiveOrder] = {
    "las": PreemptiveOrder(las.order, las.pending_level, las.running_keys, las.promote),
    "srtf_oracle": PreemptiveOrder(srtf.order, srtf.pending_level, srtf.running_keys),
}
QUEUE_ORDERS: dict[str, QueueOrder[Session]] = {"fair_share": queues.FAIR_SHARE, "single": queues.SINGLE}
USER_ORDERS: dict[str, UserOrder[Session]] = {"least_used": users.LEAST_USED, "none": users.NONE}
QUOTA_CHECKS: dict[str, QuotaCheck[Session]] = {"borrow": quota.borrow, "isolated": quota.isolated}
# How to find each project's own nodes; None: no node sets (the isolated quota check counts GPUs anywhere).
PARTITIONS: dict[str, Assign | None] = {"gpus": None, "nodes": partition.assign}
BLOCKINGS: dict[str, Blocking[Session]] = {
    "reserve": blocking.reservation,
    "all": blocking.every_queue,
    "project": blocking.own_queue,
    "none": blocking.nothing,
}


def hooks(config: SchedulerConfig) -> Hooks[Session]:
    """The plugins ``config`` names; an unknown name is a one-line error naming the known ones."""
    preemptive = PREEMPTIVE.get(config.job_order)
    return Hooks(
        # in the order they were looked up before they were gathered here (the first unknown name is told)
        job_order=preemptive.order(config) if preemptive is not None else job_order(config.job_order),
        preemptive=preemptive,
        partition=lookup(PARTITIONS, config.partition, "partition"),
        queue_order=lookup(QUEUE_ORDERS, config.queue_order, "queue order"),
        quota_check=lookup(QUOTA_CHECKS, config.quota_check, "quota check"),
        blocking=lookup(BLOCKINGS, config.blocking, "blocking"),
        user_order=lookup(USER_ORDERS, config.user_order, "user order"),
        placement=placement(config.placement),
        node_penalties=NODE_PENALTIES,
    )


def placement(name: str) -> PlacementPlugin:
    return lookup(PLACEMENTS, name, "placement")


def job_order(name: str) -> JobOrder:
    """A plain job order (a key of the job alone), by name; ``hooks`` also knows preemptive ones."""
    return lookup(JOB_ORDERS, name, "job order")


def lookup(table: dict[str, T], name: str, what: str) -> T:
    try:
        return table[name]
    except KeyError:
        raise InvalidInput(f"unknown {what} {name!r}: use one of {', '.join(table)}") from None

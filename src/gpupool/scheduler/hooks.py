"""The hooks plugins implement, in one place, and the set of them one configuration names.

A policy (``SchedulerConfig``) names, for each decision the actions leave open, a hook: the job
order and, for a preemptive order, its displacing rules; the placement (a node score); the queue
order, the user order, the quota check and the blocking, which allocate calls; the partition. The
placement also takes node penalties, which every policy gets (the spreading of a service's
replicas). Plugins (``plugins/``) implement these types; ``registry`` maps names to them and
builds a ``Hooks`` per configuration; the session and the actions call them through it.

This module sits below the session and the plugins: it imports neither. A hook that is called
with the session says so by a type parameter (``S``), which ``registry`` fills with ``Session``."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from gpupool.domain.decisions import Reason
from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler.cluster import ClusterState, NodeFree
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.partition import Partitions

S = TypeVar("S")  # the session a hook is called with

# Job order: a key of the waiting job (smaller goes first). Its first element is the priority
# class (and, for las, the queue): the user order orders users within it.
JobOrder = Callable[[PendingJob], tuple[int, float, int]]
Ranked = list[tuple[tuple[int, float, int], PendingJob]]

# Placement: a node score for one worker (lower is better), the GPUs it gets on the chosen node.
NodeScore = Callable[[NodeFree, WorkerDemand], tuple[int, ...]]
GpuPicker = Callable[[NodeFree, WorkerDemand], tuple[int, ...]]
# The best node among those a predicate (at least ``can_fit``) accepts, by (score, name); None: none.
Chooser = Callable[[ClusterState, WorkerDemand, Callable[[NodeFree], bool]], NodeFree | None]

# Node penalty: nodes one job should rather not go on, with how much (nodes not named: 0). It
# scores in front of the placement's score: the job goes on a node of the least penalty where it
# fits, and on a node of the next only where none fits. Opened once per session (``OpenNodePenalty``),
# so that it may keep what it learns in the cycle, the starts of earlier jobs included.
NodePenalty = Callable[[PendingJob], Mapping[str, int]]
OpenNodePenalty = Callable[[S], NodePenalty]

# Partition: each project's own nodes, where a policy confines projects to nodes.
Assign = Callable[[Iterable[Node], Iterable[Project]], Partitions]

# Quota check: why a job may not start now however many GPUs are free (None: it may).
QuotaCheck = Callable[[S, PendingJob], Reason | None]
# Blocking: the queues that wait behind the first job of ``queue`` that cannot start, given its
# quota refusal (None: it passed the check but did not fit).
Blocking = Callable[[S, PendingJob, str, Collection[str], Reason | None], Collection[str]]


def _unchanged(ranked: Ranked, now: datetime, config: SchedulerConfig) -> Ranked:
    return ranked


@dataclass(frozen=True, slots=True)
class PreemptiveOrder:
    """A job order that also ranks running jobs, so that a waiting job may displace running
    ones that rank behind it (the ``displace`` action), and may move waiting jobs up as time
    passes (``promote``).

    A waiting job's ``pending_level`` is (its level, a bound): it may displace a running job
    whose key at that level (``running_keys``, fixed while the job runs) is below the bound;
    None: it displaces nobody. ``displace_index`` keeps the keys sorted from cycle to cycle."""

    order: Callable[[SchedulerConfig], JobOrder]
    pending_level: Callable[[PendingJob, datetime, SchedulerConfig], tuple[int, float] | None]
    running_keys: Callable[[RunningJob, SchedulerConfig], tuple[float, ...]]
    promote: Callable[[Ranked, datetime, SchedulerConfig], Ranked] = _unchanged


@dataclass(frozen=True, slots=True)
class PlacementPlugin:
    """A node score (lower is better) whose first element orders nodes by free GPUs:
    ascending (fewest free first) or not. The cluster index then scans nodes level by level and
    stops at the first level with a fit, instead of scoring every node."""

    score: NodeScore
    fewest_free_first: bool
    # True when the score's first key is the free-GPU count, so the first bucket with a fit wins.
    first_bucket_wins: bool = True
    # Which free GPUs of the chosen node a worker gets; None: the lowest indices.
    pick_gpus: GpuPicker | None = None
    # For GPU shares: True when the score puts nodes that already share a GPU first, then orders
    # by free count, so the scan may stop early as for whole GPUs.
    shares_first: bool = False
    # Finds the node the scan would, faster (frag: from the cluster's nodes grouped by key).
    choose: Chooser | None = None
    # The plugin to use for a pool whose workers (demand, count), running and waiting, are these,
    # given what the pool's last cycle used (``learned``): frag measures nodes against the pool's
    # own mix of workers. None: this one, whatever the pool.
    for_pool: Callable[[Iterable[tuple[WorkerDemand, int]], object | None], PlacementPlugin] | None = None
    learned: object | None = None  # what for_pool learned (frag: its FragPlacement), for the next cycle


def one_queue(job: PendingJob) -> str:
    """The queue key that puts every job in one queue (allocate then skips the split)."""
    return ""


def one_line(job: PendingJob) -> str:
    """The user line that puts every job of a queue in one line (the queue is the job order)."""
    return ""


@dataclass(frozen=True, slots=True)
class QueueOrder(Generic[S]):
    key: Callable[[PendingJob], str]  # the queue a job joins
    rank: Callable[[S, str], tuple[float, str]]  # of a queue, now: smaller goes first


@dataclass(frozen=True, slots=True)
class UserOrder(Generic[S]):
    user: Callable[[PendingJob], str]  # the line within its queue a job joins
    load: Callable[[S, PendingJob], float]  # of that job's user, now: less goes first


@dataclass(frozen=True, slots=True)
class Hooks(Generic[S]):
    """The hooks a configuration names, looked up once per cycle (``registry.hooks``)."""

    job_order: JobOrder
    preemptive: PreemptiveOrder | None  # the job order's displacing rules, if it has them
    placement: PlacementPlugin  # as configured; the session fits it to the pool (``for_pool``)
    node_penalties: tuple[OpenNodePenalty[S], ...]
    queue_order: QueueOrder[S]
    user_order: UserOrder[S]
    quota_check: QuotaCheck[S]
    blocking: Blocking[S]
    partition: Assign | None

"""Scheduler configuration as data: which actions run, in which order, with which hooks.

Each hook is a name looked up in a table of ``registry`` (``registry.hooks``). The defaults are
the ``default`` policy; ``policies.POLICIES`` names the others."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_RECLAIM_MIN_RUN_S = 86400.0  # a day: past it a lender's quota would hardly be a guarantee
MAX_WAIT_BOUND_S = 30 * 86400.0  # --max-wait: past a month, aging would hardly keep a promise


@dataclass(frozen=True, slots=True)
class LasConfig:
    """The least-attained order's knobs (``plugins.las``): Tiresias' discretised 2D-LAS.

    A job's queue is the number of ``thresholds`` (GPU-seconds received, across preemptions) it
    has passed; queue 0 goes first. A running job may be displaced by a waiting job of a lower
    queue once it has run ``min_run_s`` in its current run (so no job is thrashed), and a job that
    has waited ``promote_after`` times as long as it ran goes back to queue 0 (no starvation).
    With ``checkpointed_only`` only jobs with a checkpoint directory are displaced: one without
    would lose all its work each time, and a long one might never finish."""

    thresholds: tuple[float, ...] = (3_600.0, 36_000.0)
    min_run_s: float = 600.0
    promote_after: float = 4.0
    checkpointed_only: bool = True
    # A displaced job's next run lasts at least this share of the time it ran before (besides
    # ``min_run_s``): a long job sinking to the last queue is not displaced every ``min_run_s``.
    min_run_share: float = 0.0


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    # Elastic jobs (issue 35): shrink takes workers above a minimum before whole jobs are stopped;
    # grow adds workers into what the others left free. Without elastic jobs both do nothing.
    actions: tuple[str, ...] = ("allocate", "backfill", "shrink", "reclaim", "preempt", "displace", "grow")
    placement: str = "frag"  # node score
    job_order: str = "las"  # within a queue: least attained GPU time first (``plugins.las``)
    queue_order: str = "fair_share"  # which queue a job joins, and which queue goes next
    user_order: str = "least_used"  # within a queue, whose jobs go next: the user who used less
    quota_check: str = "borrow"  # why a job may not start whatever is free (quota, limit)
    blocking: str = "reserve"  # what a job that cannot start blocks behind it
    # Where the isolated quota check confines a project: "gpus", its quota in GPUs on any node;
    # "nodes", its own whole nodes (``partition``), as Philly's virtual clusters and Slurm did.
    partition: str = "gpus"
    las: LasConfig = field(default_factory=LasConfig)  # the ``las`` job order's queues and bounds
    # A borrower's job is reclaimed only once it has run this long in its current run (KAI's
    # reclaim min runtime, Slurm's PreemptExemptTime): without it a job that borrows may be taken
    # back minutes after each start, again and again (106 times for one job in a Philly replay).
    # It delays a lender's quota by at most this long; 0 (the default) keeps quotas immediate.
    reclaim_min_run_s: float = 0.0
    # A waiting job that has waited this long goes before every job that has not, oldest first
    # (``aging``): no job starves behind a stream of favoured ones. 0 (the default): off.
    max_wait_s: float = 0.0
    # Beyond quotas, reclaim also takes checkpointed jobs that ran the minimum back from projects
    # above their fair share for projects below it that wait (``actions/fair_reclaim``). Off: as before.
    fair_reclaim: bool = False

"""Scheduler configuration as data: which actions run, in which order, with which hooks.

Each hook is a name looked up in a table: ``job_order`` and ``placement`` in ``registry``, the
others (``partition`` included) in ``policies``. The defaults are the ``default`` policy; ``policies.POLICIES`` names
the others."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    actions: tuple[str, ...] = ("allocate", "backfill", "reclaim", "preempt")
    placement: str = "binpack"  # node score
    job_order: str = "priority_fifo"  # within a queue
    queue_order: str = "fair_share"  # which queue a job joins, and which queue goes next
    user_order: str = "least_used"  # within a queue, whose jobs go next: the user who used less
    quota_check: str = "borrow"  # why a job may not start whatever is free (quota, limit)
    hold_up: str = "reserve"  # what a job that cannot start holds up behind it
    # Where the isolated quota check confines a project: "gpus", its quota in GPUs on any node;
    # "nodes", its own whole nodes (``partition``), as Philly's virtual clusters and Slurm did.
    partition: str = "gpus"

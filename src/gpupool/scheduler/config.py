"""Scheduler configuration as data: which actions run, in which order, with which plugins."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    actions: tuple[str, ...] = ("allocate", "backfill", "reclaim", "preempt")
    placement: str = "binpack"
    job_order: str = "priority_fifo"
    # Strict: the first job that does not fit blocks those behind it (implied by backfill, which
    # then decides what may pass). Fair share off: one queue for all projects, in job order.
    strict: bool = False
    fair_share: bool = True
    # Isolated: each project is confined to its quota (no borrowing) and, when strict, blocks only
    # its own queue: static partitions, as Philly's virtual clusters were.
    isolated: bool = False

"""Scheduler configuration as data: which actions run, in which order, with which plugins."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    actions: tuple[str, ...] = ("allocate", "backfill", "reclaim", "preempt")
    placement: str = "binpack"
    job_order: str = "priority_fifo"

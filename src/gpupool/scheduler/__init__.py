"""The functional core: ``schedule(snapshot, config) -> CycleResult``. No I/O, no clock reads."""

from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import schedule
from gpupool.scheduler.incremental import CycleMemory

__all__ = ["CycleMemory", "SchedulerConfig", "schedule"]

"""The functional core: ``schedule(snapshot, config) -> CycleResult``. No I/O, no clock reads."""

from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import schedule

__all__ = ["SchedulerConfig", "schedule"]

"""What the controller's steps are made of, and what one tick's steps hand each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.clock import Clock
from gpupool.controller.alerts import AlertWatch
from gpupool.controller.applier import Applier
from gpupool.controller.idle import IdleWatch
from gpupool.controller.monitor import Monitor
from gpupool.controller.ports import PortWalls
from gpupool.controller.settings import ControllerSettings
from gpupool.controller.telemetry import Round, TelemetrySampler
from gpupool.controller.user_logs import UserLogs
from gpupool.domain.decisions import CycleResult
from gpupool.domain.nodes import Node
from gpupool.executors.base import Executor
from gpupool.scheduler import SchedulerConfig
from gpupool.store.db import Database
from gpupool.store.sealing import Sealer


@dataclass(slots=True)
class Shared:
    """A tick's news, passed from the steps that learn it to the steps that act on it."""

    nodes: list[Node] = field(default_factory=list)  # the nodes last recorded (node sync)
    nodes_changed: bool = False  # recorded nodes changed and node alerts have not looked yet
    dirty: bool = True  # something changed that the scheduler has not seen (a submit, a cancel, a start)
    touched: set[int] = field(default_factory=set)  # jobs whose workers exited or that stop, this tick
    readings: Round | None = None  # this tick's GPU readings, when a round was due
    result: CycleResult | None = None  # this tick's scheduling cycle, when one ran
    waiting: bool = False  # whether the last cycle left jobs waiting

    def new_tick(self) -> None:
        self.touched, self.readings, self.result = set(), None, None


def _unobserved(_seconds: float) -> None:
    """The default observer: a controller nobody measures."""


@dataclass(frozen=True, slots=True)
class Parts:
    """Everything a step may use: the store, the backend, the clock, the settings, the components
    that act (applier, monitor) or watch (telemetry, idle, alerts, port walls, user logs), and the
    tick's shared news."""

    db: Database
    executor: Executor
    clock: Clock
    config: SchedulerConfig
    settings: ControllerSettings
    applier: Applier
    monitor: Monitor
    telemetry: TelemetrySampler
    idle: IdleWatch
    alerts: AlertWatch
    ports: PortWalls
    user_logs: UserLogs
    shared: Shared
    on_cycle: Callable[[float], None] = _unobserved
    on_first_start: Callable[[float], None] = _unobserved

    @classmethod
    def build(
        cls,
        db: Database,
        executor: Executor,
        clock: Clock,
        config: SchedulerConfig,
        settings: ControllerSettings,
        on_cycle: Callable[[float], None] = _unobserved,
        on_first_start: Callable[[float], None] = _unobserved,
        sealer: Sealer | None = None,
    ) -> Parts:
        applier = Applier(
            db, executor, clock, settings.kill_grace_s, settings.allow_system_accounts, sealer, settings.max_slowdown
        )
        return cls(
            db,
            executor,
            clock,
            config,
            settings,
            applier,
            Monitor(db, executor, clock, applier, settings.restart_backoff_s, settings.image_wait_s),
            TelemetrySampler(db, executor, clock, settings.telemetry_every_s, settings.telemetry_retention),
            IdleWatch(db, clock, settings.idle, applier),
            AlertWatch(db, clock, settings.alerts),
            PortWalls(db, executor),  # served ports walled from the other nodes' jobs
            UserLogs(
                db,
                executor,
                clock,
                settings.max_user_log_bytes,
                settings.user_logs_every_s,
                min(15.0, settings.user_logs_every_s),
            ),
            Shared(),
            on_cycle,
            on_first_start,
        )


class PartsStep:
    """The base of the table's steps: each holds the controller's parts, and most run at every
    tick (their own checks, or their component's, say when there is anything to do)."""

    name = ""

    def __init__(self, parts: Parts) -> None:
        self._parts = parts

    @property
    def every_s(self) -> float:
        return 0.0

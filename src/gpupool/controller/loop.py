"""The controller loop: reap exits, settle jobs, schedule, apply. One thread, short transactions,
no database session open while processes are launched or polled."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from gpupool.clock import Clock
from gpupool.controller.alerts import AlertWatch
from gpupool.controller.applier import Applier
from gpupool.controller.idle import IdleWatch
from gpupool.controller.monitor import Monitor
from gpupool.controller.ports import PortWalls
from gpupool.controller.recovery import recover
from gpupool.controller.telemetry import TelemetrySampler
from gpupool.controller.user_logs import UserLogs
from gpupool.domain.alerts import AlertRules
from gpupool.domain.audit import AUDIT_KEPT
from gpupool.domain.decisions import CycleResult, Reason, ReasonCode
from gpupool.domain.idle import IdleSettings
from gpupool.domain.nodes import Node
from gpupool.domain.telemetry import TelemetryRetention
from gpupool.domain.user_logs import DEFAULT_MAX_USER_LOG_BYTES
from gpupool.executors.base import Executor
from gpupool.scheduler import CycleMemory, SchedulerConfig, schedule
from gpupool.store import arrays as array_repo
from gpupool.store import audit as audit_repo
from gpupool.store import drain as drain_repo
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store import projects as project_repo
from gpupool.store import prune
from gpupool.store import user_usage as user_usage_repo
from gpupool.store.db import Database
from gpupool.store.snapshot import SpecCache, load_snapshot

log = logging.getLogger("gpupool.controller")
SATURATED_REST_S = 0.05
SATURATED_DOUBLINGS = 3  # fruitless cycles in a row double the rest up to 8 x SATURATED_REST_S
T = TypeVar("T")


def rest_after(spent: float, moved: bool, waiting: bool, fruitless: int, interval_s: float) -> float:
    """How long the loop rests after a cycle that took ``spent`` seconds (an exit ends it sooner).

    A burst of submits into a full cluster wakes the loop at once, but a cycle that moved nothing
    rests twice as long as it took (a third of the time busy at most), so the API keeps most of
    the interpreter and the burst lands in fewer, larger cycles. A cycle that started or reaped work
    rests a quarter of its time: short jobs turn over fast. While jobs wait and the last cycle could
    start none of them (``fruitless`` such cycles in a row), the next waits at least
    SATURATED_REST_S, doubled for each further one up to SATURATED_DOUBLINGS times: a burst into a
    full cluster costs a few cycles a second, not one per submission (measured: 1.55 -> 0.3 ms of
    controller per submission). Never longer than the interval."""
    if moved:
        return min(spent / 4, interval_s)
    floor = SATURATED_REST_S * 2 ** min(max(fruitless - 1, 0), SATURATED_DOUBLINGS) if waiting else 0.0
    return min(max(2 * spent, floor), interval_s)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    interval_s: float = 0.5
    kill_grace_s: float = 10.0
    # A quiet cluster is still rescheduled this often, as a safety net under the event-driven cycles.
    full_cycle_s: float = 5.0
    # Fair share remembers usage with this half-life (0: only what is held now counts).
    fair_share_half_life_s: float = 86400.0
    usage_every_s: float = 10.0
    # How often the executor is asked which nodes it serves (joins, deaths on the Ray backend).
    node_sync_s: float = 1.0
    # GPU telemetry: every node that is not down is read this often (clock time), and kept so long.
    telemetry_every_s: float = 5.0
    telemetry_retention: TelemetryRetention = field(default_factory=TelemetryRetention)
    # What makes an allocated GPU idle, and when GPU and node alerts are raised.
    idle: IdleSettings = field(default_factory=IdleSettings)
    alerts: AlertRules = field(default_factory=AlertRules)
    # The audit log keeps this long (90 days); older entries are pruned this often.
    audit_kept_s: float = AUDIT_KEPT.total_seconds()
    audit_prune_every_s: float = 3600.0
    # A job requeued after a failure waits this long before its next attempt, doubling per failure
    # (the head sets it from --restart-backoff; 0 here: a controller built in a test requeues at once).
    restart_backoff_s: float = 0.0
    # Finished jobs, their events, run directories and logs are deleted this long after they ended.
    keep_finished_s: float = 30 * 86400.0
    # Users' jobs may run as root or system accounts (gpupool up --allow-system-accounts); the
    # nodes refuse them otherwise, whatever the head checked at submit.
    allow_system_accounts: bool = False
    # Each user's jobs' logs together, on every node, are kept under this (--max-user-logs; 0: no cap).
    max_user_log_bytes: int = DEFAULT_MAX_USER_LOG_BYTES
    user_logs_every_s: float = 60.0  # and soon after exits (at most every 15 s)


def _on_hold_reason(until: datetime) -> Reason:
    return Reason(
        ReasonCode.IDLE_HOLD,
        "preempted for sitting idle; the jobs that waited go first, and it is scheduled again from "
        f"{until:%H:%M:%S} UTC",
    )


def _unobserved(_seconds: float) -> None:
    """The default observer: a controller nobody measures."""


class Controller:
    def __init__(
        self,
        db: Database,
        executor: Executor,
        clock: Clock,
        config: SchedulerConfig,
        settings: ControllerSettings,
        *,
        on_cycle: Callable[[float], None] = _unobserved,
        on_first_start: Callable[[float], None] = _unobserved,
    ) -> None:
        """``on_cycle`` hears the seconds of each cycle that scheduled; ``on_first_start`` the
        seconds a job waited from its submission to its first start (the head feeds both to
        ``/metrics``). Both are called in the loop's thread, so they must be quick and never raise."""
        self._db = db
        self._executor = executor
        self._clock = clock
        self._config = config
        self._settings = settings
        self._applier = Applier(db, executor, clock, settings.kill_grace_s, settings.allow_system_accounts)
        self._monitor = Monitor(db, executor, clock, self._applier, settings.restart_backoff_s)
        self._wake = threading.Event()
        self._bell = threading.Event()  # an exit rang: the loop's rest ends
        self._stop = threading.Event()
        self._specs = SpecCache()
        self._memory = CycleMemory()  # the scheduler's index, carried from cycle to cycle
        self._written: dict[int, Reason] = {}
        self._dirty = True
        self._moved = False  # whether the last cycle started, stopped or reaped anything
        self._waiting = False  # whether it left jobs waiting
        self._heard_exits = False  # whether the backend rings at exits (rings_at_exits, exit_rang)
        self._fruitless = 0  # cycles in a row that left jobs waiting and started nothing
        self._exits_rang = False
        self._last_reap = 0.0
        self._last_full = 0.0
        # When the first job held back (a restart's back-off, an idle job's hold) may start again,
        # or the scheduler's decisions change by time alone (``CycleResult.wake_at``): a cycle runs
        # then, not at the next full cycle up to full_cycle_s later.
        self._wake_at: datetime | None = None
        self._last_usage = 0.0
        self._last_sync = 0.0
        self._audit_pruned: float | None = None  # when the audit log was last pruned (monotonic)
        self._finished_pruned: float | None = None  # when finished jobs were last pruned (monotonic)
        self._nodes_seen: list[Node] = []
        self._telemetry = TelemetrySampler(
            db, executor, clock, settings.telemetry_every_s, settings.telemetry_retention
        )
        self._idle = IdleWatch(db, clock, settings.idle, self._applier)
        self._alerts = AlertWatch(db, clock, settings.alerts)
        self._ports = PortWalls(db, executor)  # served ports walled from the other nodes' jobs
        self._user_logs = UserLogs(
            db,
            executor,
            clock,
            settings.max_user_log_bytes,
            settings.user_logs_every_s,
            min(15.0, settings.user_logs_every_s),
        )
        self._thread: threading.Thread | None = None
        self._on_cycle = on_cycle
        self._on_first_start = on_first_start
        self.last_cycle_s = 0.0

    def start(self) -> None:
        """Register nodes, recover from a previous run, then run the loop in a thread."""
        self._sync_nodes(force=True)
        self._watch(self._alerts.nodes)
        self._monitor.settle(recover(self._db, self._executor, self._clock))
        self._thread = threading.Thread(target=self._run, name="gpupool-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._bell.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def wake(self) -> None:
        """Run a cycle now (after a submit or cancel) instead of at the next tick."""
        self._dirty = True
        self._wake.set()

    def rings_at_exits(self) -> None:
        """The backend will call ``exit_rang`` at every exit: from now on workers are polled
        when it rings or a second has passed, not at every tick. Told at start rather than
        learnt at the first exit, so a cluster of long jobs is not polled a dozen times a second."""
        self._heard_exits = True

    def exit_rang(self) -> None:
        """A worker's exit was recorded (the backend's exit doorbell): reap and run a cycle now.
        Once this is heard, workers are polled only when it rings or a second has passed (a
        supervisor killed outright cannot ring), not at every cycle."""
        self._heard_exits = True
        self._exits_rang = True
        self._bell.set()
        self.wake()

    def tick(self) -> CycleResult | None:
        """One cycle. Scheduling runs only when something changed (a submit, a cancel, an exit,
        a start) or a full cycle is due; exits are reaped every tick (or, once the backend rings at
        exits, when it rang or a second has passed). None when skipped."""
        started = time.perf_counter()
        if self._sync_nodes():
            self._dirty = True
            self._ports.changed()  # a node came or went: it is given the others' ports
            self._watch(self._alerts.nodes)
        touched = self._reap()
        self._moved = bool(touched)  # exits were reaped: this cycle moved work along
        if touched:
            self._ports.changed()
            self._user_logs.changed()
        with self._db.tx() as s:
            job_repo.stop_overdue(s, self._clock.now())
            drain_repo.settle_drains(s, self._clock.now())
            touched |= job_repo.stopping(s)
        self._monitor.settle(touched)
        # After settling: the jobs that just ended read finished, so their logs may be emptied now.
        self._watch(lambda: self._ports.push(self._nodes_seen))
        self._watch(lambda: self._user_logs.check(self._nodes_seen))
        self._accrue_usage()
        self._prune_audit()
        self._prune_finished()
        readings = self._telemetry.maybe_sample()
        if readings is not None:
            self._watch(lambda: self._alerts.observe(readings))
            if self._watch(lambda: self._idle.observe(readings)):
                self._dirty = True  # an idle job is being preempted
        due = time.monotonic() - self._last_full >= self._settings.full_cycle_s
        woken = self._wake_at is not None and self._clock.now() >= self._wake_at
        if not (self._dirty or touched or due or woken):
            return None
        self._dirty = False
        self._last_full = time.monotonic()
        with self._db.read() as s:  # no writer waits while the snapshot is read
            on_hold = job_repo.on_hold(s, self._clock.now())
            hold_ends = min((until for until, _ in on_hold.values()), default=None)
            capped = array_repo.capped(s)
            snapshot = load_snapshot(s, self._clock.now(), self._specs, held=capped)
        if on_hold:
            # A job backing off keeps the reason its requeue wrote (with its delay); idle ones get theirs.
            idle = {i: _on_hold_reason(until) for i, (until, backoff) in on_hold.items() if not backoff}
            with self._db.tx() as s:
                job_repo.set_reasons(s, idle)
        result = schedule(snapshot, self._config, memory=self._memory)
        self._wake_at = min((t for t in (hold_ends, result.wake_at) if t is not None), default=None)
        specs = {job.id: job.spec for job in snapshot.pending}
        submitted = {job.id: job.submitted_at for job in snapshot.pending}
        for job_id, attempt in self._applier.start_all(result.starts, specs).items():
            if attempt == 1:
                self._on_first_start((self._clock.now() - submitted[job_id]).total_seconds())
        self._applier.preempt_all(result.preemptions)
        if result.starts:
            self._ports.changed()
            self._watch(lambda: self._ports.push(self._nodes_seen))
        if result.starts or result.preemptions:
            self._moved = True
            self._dirty = True  # the next cycle sees the new placements and the stopping jobs
        self._write_reasons({**result.pending, **capped})
        self._waiting = bool(result.pending)
        self.last_cycle_s = time.perf_counter() - started
        self._on_cycle(self.last_cycle_s)
        return result

    def _reap(self) -> set[int]:
        if self._heard_exits and not self._exits_rang and time.monotonic() - self._last_reap < 1.0:
            return set()
        self._exits_rang = False  # before polling: a ring during the poll calls for another
        self._last_reap = time.monotonic()
        return self._monitor.reap()

    def _watch(self, step: Callable[[], T]) -> T | None:
        """Run an alert, idle or port-wall step; a failure is logged and retried at the next round, never
        allowed to stop scheduling."""
        try:
            return step()
        except Exception:
            log.exception("an alert, idle-GPU or port-wall step failed; trying again at the next round")
            return None

    def _sync_nodes(self, force: bool = False) -> bool:
        """Record node joins and deaths the executor reports; True when anything changed.
        A down node's workers are then polled as lost, and their jobs requeued or failed."""
        if not force and time.monotonic() - self._last_sync < self._settings.node_sync_s:
            return False
        self._last_sync = time.monotonic()
        try:
            nodes = self._executor.nodes()
        except Exception:
            log.exception("asking the executor for its nodes failed; keeping the last known ones")
            return False
        if not force and nodes == self._nodes_seen:
            return False
        with self._db.tx() as s:
            node_repo.register_nodes(s, nodes, self._clock.now())
        self._nodes_seen = nodes  # only once recorded: a failed write is retried at the next sync
        return True

    def _accrue_usage(self) -> None:
        """Fold what projects, and each user within a project, hold now into their recent usage:
        fair share between projects, and the order of users' jobs within one, read it."""
        if time.monotonic() - self._last_usage < self._settings.usage_every_s:
            return
        self._last_usage = time.monotonic()
        now, half_life_s = self._clock.now(), self._settings.fair_share_half_life_s
        with self._db.tx() as s:
            holding, _, _ = project_repo.usage(s)
            project_repo.accrue_usage(s, holding, now, half_life_s)
            user_usage_repo.accrue(s, user_usage_repo.held(s), now, half_life_s)

    def _prune_audit(self) -> None:
        every_s = self._settings.audit_prune_every_s
        if self._audit_pruned is not None and time.monotonic() - self._audit_pruned < every_s:
            return
        self._audit_pruned = time.monotonic()
        try:
            with self._db.tx() as s:
                audit_repo.prune(s, self._clock.now() - timedelta(seconds=self._settings.audit_kept_s))
        except Exception:
            log.exception("pruning the audit log failed; trying again in %.0f s", every_s)

    def _prune_finished(self) -> None:
        """Delete jobs finished longer ago than ``keep_finished_s`` (a batch per round, every
        ``audit_prune_every_s``), then their run directories and logs on their nodes."""
        every_s = self._settings.audit_prune_every_s
        if self._finished_pruned is not None and time.monotonic() - self._finished_pruned < every_s:
            return
        self._finished_pruned = time.monotonic()
        try:
            now = self._clock.now()
            with self._db.tx() as s:
                by_node = prune.prune_finished(s, now - timedelta(seconds=self._settings.keep_finished_s), now)
        except Exception:
            log.exception("pruning finished jobs failed; trying again in %.0f s", every_s)
            return
        for node, job_ids in sorted(by_node.items()):
            if node:
                try:
                    self._executor.forget(node, job_ids)
                except Exception as exc:  # a node that is away keeps its files; nothing else depends on them
                    log.warning("node %s could not delete the files of %d pruned job(s): %s", node, len(job_ids), exc)
        if sum(len(j) for j in by_node.values()) >= prune.BATCH:
            self._finished_pruned = None  # more to do: the next round goes on

    def _write_reasons(self, reasons: dict[int, Reason]) -> None:
        """Write only reasons that differ from what this controller last wrote."""
        changed = {i: r for i, r in reasons.items() if self._written.get(i) != r}
        if changed:
            with self._db.tx() as s:
                job_repo.set_reasons(s, changed)
        self._written = dict(reasons)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            started = time.monotonic()
            self._moved = False
            try:
                self.tick()
            except Exception:
                log.exception("controller cycle failed; retrying")
            spent = time.monotonic() - started
            self._fruitless = 0 if self._moved or not self._waiting else self._fruitless + 1
            rest = rest_after(spent, self._moved, self._waiting, self._fruitless, self._settings.interval_s)
            self._bell.wait(rest)  # an exit ends the rest: its GPUs are free
            self._bell.clear()
            self._wake.wait(max(0.0, self._settings.interval_s - spent))

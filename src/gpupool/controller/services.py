"""The service reconciler: keeps each service's replicas as its spec and load ask, in a thread of
its own beside the controller loop, so a slow health check never delays scheduling.

Each round is load -> decide -> apply (dstack style): one short read of services and replicas;
health checks with no transaction open (in parallel, each bounded by ``probe_timeout_s``); then
readiness, the autoscaler's count (``domain.autoscale``) and the replica plan (``domain.rollout``),
both pure; then one short write that records readiness changes and submits or cancels replica
jobs. Replicas are ordinary jobs: the controller schedules, starts, reaps and kills them.

A service whose replicas keep dying is not resubmitted in a tight loop: after a replica ends
unasked, the next replacement waits, doubling up to ``max_backoff_s``; a ready replica resets it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import httpx

from gpupool.clock import Clock
from gpupool.domain.autoscale import AutoscalePolicy, AutoscaleState, autoscale
from gpupool.domain.errors import Conflict
from gpupool.domain.jobs import JobSpec
from gpupool.domain.rollout import Plan, plan
from gpupool.domain.services import Replica, ServiceRecord
from gpupool.store import bulk
from gpupool.store import jobs as job_repo
from gpupool.store import services as service_repo
from gpupool.store.db import Database
from gpupool.store.transitions import add_event
from gpupool.usecases.load import LoadBoard

log = logging.getLogger("gpupool.usecases")

# GET http://host:port/path within a timeout: None when it answered 2xx, else why not.
Probe = Callable[[str, int, str, float], str | None]


def http_probe(host: str, port: int, path: str, timeout_s: float) -> str | None:
    url = f"http://{host}:{port}{path}"
    try:
        response = httpx.get(url, timeout=timeout_s, follow_redirects=False)
    except httpx.TimeoutException:
        return f"GET {url}: no answer within {timeout_s:g}s"
    except httpx.HTTPError as exc:
        return f"GET {url}: {type(exc).__name__}: {exc}"
    if 200 <= response.status_code < 300:
        return None
    return f"GET {url}: HTTP {response.status_code}"


@dataclass(frozen=True, slots=True)
class ReconcilerSettings:
    interval_s: float = 0.5
    probe_timeout_s: float = 1.0
    probes_at_once: int = 16
    max_backoff_s: float = 60.0
    autoscale_up_delay_s: float = 0.0
    autoscale_window_s: float = 30.0


@dataclass
class _Memory:
    """What the reconciler keeps between rounds, per service (lost on restart, harmlessly)."""

    alive: dict[str, set[int]] = field(default_factory=dict)  # replicas seen alive and not stopping
    backoff_s: dict[str, float] = field(default_factory=dict)
    not_before: dict[str, datetime] = field(default_factory=dict)
    told_not_ready: set[int] = field(default_factory=set)  # worker ids whose "never ready" event is written


class ServiceReconciler:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        load: LoadBoard,
        wake_controller: Callable[[], None],
        settings: ReconcilerSettings = ReconcilerSettings(),
        probe: Probe = http_probe,
    ) -> None:
        self._db, self._clock, self._load = db, clock, load
        self._wake_controller = wake_controller
        self._settings = settings
        self._probe = probe
        self._memory = _Memory()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(settings.probes_at_once, thread_name_prefix="gpupool-probe")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpupool-services", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def step(self) -> int:
        """One round; how many replica jobs it submitted or asked to stop."""
        with self._db.read() as s:
            records = service_repo.list_services(s)
            templates = {r.spec.name: r.spec.replica_spec() for r in records}
            found = service_repo.replicas(s, templates)
        self._load.keep_only(templates)
        health = self._check(records, found)
        now = self._clock.now()
        moved = 0
        for record in records:
            try:
                moved += self._reconcile(record, templates[record.spec.name], found[record.spec.name], health, now)
            except Conflict as exc:  # a replica moved under us: decided again next round
                log.info("service %s: %s; trying again", record.spec.name, exc)
        if moved:
            self._wake_controller()
        return moved

    def _check(self, records: list[ServiceRecord], found: dict[str, list[Replica]]) -> dict[int, str | None]:
        """Health of every running replica with a port, by worker id (None: healthy)."""
        paths = {r.spec.name: r.spec.health_path for r in records}
        targets = [
            (r.worker_id, r.host, r.port, paths[name])
            for name, replicas in found.items()
            for r in replicas
            if r.state == "running" and r.host and r.port and r.worker_id is not None and not r.stopping
        ]
        timeout = self._settings.probe_timeout_s
        futures = [(w, self._pool.submit(self._probe, h, p, path, timeout)) for w, h, p, path in targets if h and p]
        out: dict[int, str | None] = {}
        for worker_id, future in futures:
            try:
                out[worker_id] = future.result(timeout=timeout + 5)
            except Exception as exc:  # a probe that broke counts as a failed check, never as a crash
                out[worker_id] = f"the health check failed: {exc}"
        return out

    def _reconcile(
        self,
        record: ServiceRecord,
        template: JobSpec,
        replicas: list[Replica],
        health: dict[int, str | None],
        now: datetime,
    ) -> int:
        name, spec = record.spec.name, record.spec
        replicas = self._readiness(record, replicas, health, now)
        self._watch_deaths(name, replicas, now)
        desired, scaled = record.desired, None
        if spec.autoscaled:
            policy = AutoscalePolicy(
                spec.min_replicas,
                spec.max_replicas,
                spec.target_concurrency,
                up_delay_s=self._settings.autoscale_up_delay_s,
                down_delay_s=spec.scale_down_delay_s,
                scale_to_zero=spec.scale_to_zero,
                window_s=self._settings.autoscale_window_s,
            )
            state = AutoscaleState.from_dict(dict(record.autoscale))
            decision = autoscale(policy, record.desired, self._load.samples(name), now, state)
            if decision.replicas != desired:
                log.info("service %s: %s", name, decision.reason)
            if decision.replicas != desired or decision.state != state:
                desired, scaled = decision.replicas, decision.state.to_dict()
        todo = plan(desired, replicas)
        if todo.submit and now < self._memory.not_before.get(name, now):
            todo = Plan(0, todo.stop, f"{todo.reason}; replacements wait after a replica died")
        if todo.idle and scaled is None:
            return 0
        with self._db.tx() as s:
            if service_repo.find_service(s, name) is None:  # deleted meanwhile
                return 0
            if scaled is not None:
                service_repo.set_desired(s, name, desired, scaled, now)
            for job_id in todo.stop:
                job_repo.request_cancel(s, job_id, now, f"service {name} ({todo.reason})")
            if todo.submit:
                made = bulk.insert_jobs(s, [(template, record.owner, record.run_as)] * todo.submit, now)
                for job in made:
                    job_repo.add_job_event(s, job.id, now, "replica", f"replica of service {name}: {todo.reason}")
        if todo.submit or todo.stop:
            log.info("service %s: %s (submit %d, stop %s)", name, todo.reason, todo.submit, list(todo.stop))
        return todo.submit + len(todo.stop)

    def _readiness(
        self, record: ServiceRecord, replicas: list[Replica], health: dict[int, str | None], now: datetime
    ) -> list[Replica]:
        """Record readiness that changed (with an event), and say once why a replica is still not
        ready ``ready_timeout_s`` after it started. The replicas as they are now."""
        out: list[Replica] = []
        changes: list[tuple[Replica, str | None]] = []
        late: list[tuple[Replica, str]] = []
        for r in replicas:
            if r.worker_id is None or r.worker_id not in health:
                out.append(r)
                continue
            problem = health[r.worker_id]
            if (problem is None) != r.ready:
                changes.append((r, problem))
                r = replace(r, ready=problem is None)
            elif problem is not None and self._late(r, record.spec.ready_timeout_s, now):
                late.append((r, problem))
            out.append(r)
        if changes or late:
            with self._db.tx() as s:
                for r, problem in changes:
                    assert r.worker_id is not None
                    service_repo.set_ready(s, r.worker_id, now if problem is None else None)
                    if problem is None:
                        kind, message = "replica_ready", f"ready: GET {record.spec.health_path} answered"
                    else:
                        kind, message = "replica_not_ready", f"not ready: {problem}"
                    add_event(s, now, kind=kind, message=message, job_id=r.job_id)
                for r, problem in late:
                    assert r.worker_id is not None and r.started_at is not None
                    waited = (now - r.started_at).total_seconds()
                    message = f"not ready {waited:.0f}s after it started: {problem}"
                    add_event(s, now, kind="replica_not_ready", message=message, job_id=r.job_id)
                    self._memory.told_not_ready.add(r.worker_id)
        return out

    def _late(self, r: Replica, timeout_s: float, now: datetime) -> bool:
        """Not ready ``timeout_s`` after it started, and not said so yet."""
        if r.started_at is None or r.worker_id in self._memory.told_not_ready:
            return False
        return (now - r.started_at).total_seconds() >= timeout_s

    def _watch_deaths(self, name: str, replicas: list[Replica], now: datetime) -> None:
        """A replica seen alive that is gone without being asked to stop died: back off."""
        alive = {r.job_id for r in replicas if not r.stopping}
        died = self._memory.alive.get(name, set()) - {r.job_id for r in replicas}
        self._memory.alive[name] = alive
        if any(r.ready for r in replicas):
            self._memory.backoff_s.pop(name, None)
        if died:
            delay = min(self._settings.max_backoff_s, max(1.0, 2 * self._memory.backoff_s.get(name, 0.5)))
            self._memory.backoff_s[name] = delay
            self._memory.not_before[name] = now + timedelta(seconds=delay)
            log.info("service %s: replica(s) %s ended unasked; replacing in %.0f s", name, sorted(died), delay)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.step()
            except Exception:
                log.exception("service reconciler round failed; retrying")
            self._wake.wait(self._settings.interval_s)

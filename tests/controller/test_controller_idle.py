"""The idle-GPU policy on a real controller and store, with a fake probe whose GPUs the test makes
idle or busy, on a virtual clock: idle GPUs are detected after the head's idle time and shown in
the API and /metrics; a project's idle timeout warns an interactive job at half, then preempts it
once idle for the whole timeout, but only while others wait; training jobs are never preempted."""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection

from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.idle import IdleSettings
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.projects import Project
from gpupool.domain.telemetry import GpuSample
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import projects as project_repo
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import ADMIN, USER, FakeExecutor

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

IDLE = IdleSettings(threshold_pct=5.0, after_s=60.0)
SETTINGS = ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf, telemetry_every_s=5.0, idle=IDLE)
TIMEOUT_S = 600.0


class QuietProbe(FakeExecutor):
    """Simulated readings, except that the GPUs of ``quiet`` jobs read 0 % though held."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(uniform(2, 2), clock)
        self.quiet: set[int] = set()
        self.gpu_jobs: dict[tuple[str, int], int] = {}

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        working = {g for g in busy if self.gpu_jobs.get((node, g)) not in self.quiet}
        return super().telemetry(node, working)


class Cluster:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.clock = FakeClock()
        self.executor = QuietProbe(self.clock)
        self.controller = Controller(db, self.executor, self.clock, SchedulerConfig(), SETTINGS)
        self.ctx = HeadContext(db, self.clock, self.executor, self.controller.wake, idle=IDLE)
        with db.tx() as s:
            node_repo.register_nodes(s, uniform(2, 2), self.clock.now())
            project_repo.set_project(
                s, Project.create("lab", quota=4, idle_timeout_s=TIMEOUT_S), self.clock.now(), everyone=True
            )
            self.token = create_token(s, "admin", "admin", self.clock.now())

    def submit(self, priority: str, gpus: int = 2, quiet: bool = False) -> int:
        spec = JobSpec.create(command=["work"], gpus=gpus, project="lab", priority=priority)
        job = job_service.submit(self.ctx, spec, USER)
        self.run_for(1)
        if quiet:
            self.executor.quiet.add(job.id)
        for p in job_service.get(self.ctx, job.id).placements:
            for g in p.gpus:
                self.executor.gpu_jobs[(p.node, g)] = job.id
        return job.id

    def run_for(self, seconds: float, step: float | None = None) -> None:
        """Ticks a second apart; over long quiet spans 5 s apart (telemetry is read every 5 s,
        and anything due within the span is still seen by its last tick), which keeps this
        module's ~2,000 ticks a test from dominating the suite."""
        step = step or (5.0 if seconds >= 100 else 1.0)
        for _ in range(round(seconds / step)):
            self.clock.advance(step)
            self.controller.tick()

    def state(self, job_id: int) -> JobState:
        return job_service.get(self.ctx, job_id).state

    def kinds(self, job_id: int) -> list[str]:
        return [e.kind for e in job_service.show(self.ctx, job_id, ADMIN)[2]]

    def idle_api(self) -> list[dict[str, object]]:
        with TestClient(create_app(self.ctx)) as client:
            response = client.get("/api/v1/gpus/idle", headers={"Authorization": f"Bearer {self.token}"})
            assert response.status_code == 200, response.text
            return list(response.json())

    def idle_metric(self) -> dict[str, float]:
        with TestClient(create_app(self.ctx)) as client:
            text = client.get("/metrics", headers={"Authorization": f"Bearer {self.token}"}).text
        return {
            s.labels["project"]: s.value
            for family in text_string_to_metric_families(text)
            if family.name == "gpupool_gpus_idle"
            for s in family.samples
        }


def test_idle_gpus_are_detected_after_the_idle_time_and_shown_in_the_api_and_metrics(db: Database) -> None:
    c = Cluster(db)
    notebook = c.submit("interactive", quiet=True)
    trainer = c.submit("train")
    c.run_for(30)
    assert c.idle_api() == []  # below the threshold, but not for 60 s yet
    assert c.idle_metric()["lab"] == 0
    c.run_for(40)
    idle = c.idle_api()
    assert {(g["node"], g["gpu"]) for g in idle} == {k for k, j in c.executor.gpu_jobs.items() if j == notebook}
    assert {g["job_id"] for g in idle} == {notebook} and all(g["idle_for_s"] >= 60 for g in idle)
    assert all(g["project"] == "lab" and g["priority"] == "interactive" for g in idle)
    assert c.idle_metric() == {"default": 0, "lab": 2}
    assert c.state(trainer) is JobState.RUNNING

    c.executor.quiet.clear()  # the notebook starts computing: its spell ends at the next reading
    c.run_for(5)
    assert c.idle_api() == [] and c.idle_metric()["lab"] == 0


def test_an_idle_interactive_job_is_warned_then_preempted_only_while_others_wait(db: Database) -> None:
    c = Cluster(db)
    notebook = c.submit("interactive", quiet=True)
    stuck_trainer = c.submit("train", quiet=True)  # idle too, but training jobs are never preempted
    c.run_for(TIMEOUT_S / 2 - 10)
    assert "idle_warning" not in c.kinds(notebook)
    c.run_for(15)
    assert c.kinds(notebook).count("idle_warning") == 1
    warning = next(e for e in job_service.show(c.ctx, notebook, ADMIN)[2] if e.kind == "idle_warning")
    assert "project lab preempts idle interactive jobs after 10m" in warning.message

    c.run_for(TIMEOUT_S)  # idle past the timeout, but nobody waits: it keeps its GPUs
    assert c.state(notebook) is JobState.RUNNING and "preempt_requested" not in c.kinds(notebook)
    assert c.kinds(notebook).count("idle_warning") == 1  # one warning per idle spell

    waiting = job_service.submit(c.ctx, JobSpec.create(command=["work"], gpus=2, project="lab"), USER).id
    c.run_for(6)
    assert "preempt_requested" in c.kinds(notebook)
    request = next(e for e in job_service.show(c.ctx, notebook, ADMIN)[2] if e.kind == "preempt_requested")
    assert "idle" in request.message and "1 job(s) waited" in request.message
    assert "preempt_requested" not in c.kinds(stuck_trainer)
    c.executor.exit(notebook, -15)  # the fake executor's kill is a no-op: the worker ends here
    c.run_for(3)
    assert c.state(waiting) is JobState.RUNNING  # the GPUs went to the job that waited...
    held = job_service.get(c.ctx, notebook)
    assert held.state is JobState.PENDING and held.reason_code == "idle_hold", held  # ...not back to it
    assert held.restarts == 0  # a preemption spends no restart
    assert c.state(stuck_trainer) is JobState.RUNNING
    job_service.cancel(c.ctx, waiting, USER)
    c.executor.exit(waiting, -15)
    c.run_for(30)
    assert c.state(notebook) is JobState.PENDING  # GPUs are free, but it yields for a minute
    c.run_for(40)
    assert c.state(notebook) is JobState.RUNNING


def test_a_busy_reading_ends_the_spell_and_the_warning_with_it(db: Database) -> None:
    c = Cluster(db)
    notebook = c.submit("interactive", quiet=True)
    c.submit("train")
    job_service.submit(c.ctx, JobSpec.create(command=["work"], gpus=2, project="lab"), USER)  # waits
    c.run_for(TIMEOUT_S - 60)
    assert c.kinds(notebook).count("idle_warning") == 1
    c.executor.quiet.discard(notebook)
    c.run_for(5)  # one busy reading
    c.executor.quiet.add(notebook)
    c.run_for(TIMEOUT_S - 60)  # long past the first spell's deadline, but this spell is younger
    assert "preempt_requested" not in c.kinds(notebook)
    assert c.kinds(notebook).count("idle_warning") == 2  # the new spell was warned in its turn
    c.run_for(70)
    assert "preempt_requested" in c.kinds(notebook)

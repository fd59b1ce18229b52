"""Elastic jobs (issue 35), the doing side: the applier carries out a cycle's GrowJob and
ShrinkJob decisions, fed to it directly (the scheduler that makes them is not asked), and the
monitor judges what the workers' exits mean for the job. A real store, the fake executor (which
records each SIGTERM it is asked to send), a virtual clock."""

from __future__ import annotations

from datetime import timedelta

from gpupool.clock import FakeClock
from gpupool.controller.applier import Applier
from gpupool.controller.monitor import Monitor
from gpupool.domain import exit_reasons
from gpupool.domain.decisions import GrowJob, ShrinkJob, StartJob
from gpupool.domain.jobs import JobSpec, JobState, Placement
from gpupool.domain.launch import LaunchRequest, WorkerExit, WorkerHandle
from gpupool.domain.records import WorkerStatus
from gpupool.domain.snapshot import RunningJob
from gpupool.domain.worker_env import Rendezvous
from gpupool.scheduler import schedule
from gpupool.sim.cluster import uniform
from gpupool.store import accounting as accounting_repo
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database
from gpupool.store.snapshot import GROW_HOLD_S, load_snapshot
from tests.support.executor import KILLED, USER, FakeExecutor


class Recording(FakeExecutor):
    """Records the workers it is asked to stop; each ends when the test says."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(uniform(2, 2), clock)
        self.killed: list[tuple[int, int, int]] = []
        self.ended: dict[tuple[int, int, int], WorkerExit] = {}
        self.ports = iter(range(29500, 29600))

    def rendezvous(self, node: str) -> Rendezvous:
        return Rendezvous(master_addr=f"10.0.0.{node[-1]}", master_port=next(self.ports))

    def kill(self, node: str, handle: WorkerHandle) -> None:
        self.killed.append(self.key(handle))

    def poll(self, node: str, handle: WorkerHandle) -> WorkerExit | None:
        return self.ended.get(self.key(handle))

    def request(self, job_id: int, worker: int) -> LaunchRequest:
        return [r for _, r in self.launched if (r.job_id, r.worker) == (job_id, worker)][-1]


class Elastic:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.clock = FakeClock()
        self.executor = Recording(self.clock)
        self.applier = Applier(db, self.executor, self.clock, kill_grace_s=5.0)
        self.monitor = Monitor(db, self.executor, self.clock, self.applier)
        with db.tx() as s:
            node_repo.register_nodes(s, self.executor.nodes(), self.clock.now())

    def start(self, spec: JobSpec, width: int) -> int:
        """Submit ``spec`` and start it on ``width`` workers, worker w on GPU w % 2 of node w // 2 + 1."""
        with self.db.tx() as s:
            job_id = job_repo.insert_job(s, spec, USER.user, self.clock.now()).id
        assert self.applier.start(StartJob(job_id, tuple(self.place(w) for w in range(width))), spec) == 1
        return job_id

    @staticmethod
    def place(worker: int, slot: int | None = None) -> Placement:
        slot = worker if slot is None else slot
        return Placement(worker, f"node-{slot // 2 + 1}", (slot % 2,))

    def settle(self, seconds: float = 1.0) -> None:
        """What the reap step does: record exits, then judge the jobs they touched."""
        self.clock.advance(seconds)
        self.monitor.settle(self.monitor.reap())

    def end(self, job_id: int, worker: int, code: int, attempt: int = 1) -> None:
        self.executor.ended[(job_id, attempt, worker)] = WorkerExit(code)

    def job(self, job_id: int) -> tuple[JobState, int]:
        with self.db.read() as s:
            record = job_repo.get_job(s, job_id)
        return record.state, record.restarts

    def events(self, job_id: int, kind: str) -> list[str]:
        with self.db.read() as s:
            return [e.message for e in job_repo.job_events(s, job_id) if e.kind == kind]

    def running(self, job_id: int) -> tuple[tuple[int, ...], frozenset[int], int]:
        """The job as the scheduler's snapshot sees it: its workers, those leaving, its width."""
        with self.db.read() as s:
            job = next(j for j in load_snapshot(s, self.clock.now()).running if j.id == job_id)
        return tuple(p.worker for p in job.placements), job.leaving, job.width


ELASTIC = JobSpec.create(command=["train"], gpus=1, workers="1:3", max_restarts=2)


def test_a_grow_launches_new_workers_told_the_same_rendezvous_and_records_why(db: Database) -> None:
    e = Elastic(db)
    job = e.start(ELASTIC, 1)
    first = e.executor.request(job, 0).env
    grown = GrowJob(job, (e.place(1), e.place(2)), "grew to 3 workers: GPUs free on node-1, node-2")
    e.clock.advance(60)
    assert e.applier.grow(grown, ELASTIC)
    assert e.job(job) == (JobState.RUNNING, 0)
    for worker in (1, 2):
        request = e.executor.request(job, worker)
        assert request.attempt == 1 and request.gpus == e.place(worker).gpus and request.grace_s == 5.0
        env = request.env
        assert env["GPUPOOL_RDZV_ENDPOINT"] == first["GPUPOOL_RDZV_ENDPOINT"] == "10.0.0.1:29500"
        assert env["GPUPOOL_RDZV_ID"] == first["GPUPOOL_RDZV_ID"] == f"gpupool-{job}-1"
        assert (env["NNODES"], env["GPUPOOL_WORKER"]) == ("1:3", str(worker))
        assert env["PET_RDZV_CONF"].startswith("is_host=0,")
    assert first["PET_RDZV_CONF"].startswith("is_host=1,")
    assert e.events(job, "grew") == ["grew to 3 workers: GPUs free on node-1, node-2"]
    assert e.running(job) == ((0, 1, 2), frozenset(), 3)
    # Past its maximum, or once it is no longer running, a grow is dropped and nothing launches.
    assert not e.applier.grow(GrowJob(job, (e.place(3),), "grew to 4 workers"), ELASTIC)
    assert len(e.executor.launched) == 3


def test_a_shrink_stops_its_workers_the_job_runs_on_and_they_end_shrunk(db: Database) -> None:
    e = Elastic(db)
    job = e.start(ELASTIC, 1)
    e.applier.grow(GrowJob(job, (e.place(1), e.place(2)), "grew to 3 workers"), ELASTIC)
    assert e.applier.shrink(ShrinkJob(job, (2,), "shrank to 2 workers: reclaimed for project nlp", for_job=99))
    assert e.executor.killed == [(job, 1, 2)]
    assert e.running(job) == ((0, 1, 2), frozenset({2}), 2)  # it holds its GPUs until it exits
    assert e.events(job, "shrank") == ["shrank to 2 workers: reclaimed for project nlp"]
    e.settle()
    assert e.job(job) == (JobState.RUNNING, 0) and e.executor.killed == [(job, 1, 2)]  # SIGTERM once
    e.end(job, 2, KILLED)
    e.settle()
    assert e.job(job) == (JobState.RUNNING, 0)
    assert e.running(job) == ((0, 1), frozenset(), 2)
    with db.read() as s:
        gone = next(w for w in worker_repo.attempt_workers(s, job, 1) if w.placement.worker == 2)
    assert (gone.status, gone.exit_code, gone.exit_reason) == (WorkerStatus.EXITED, KILLED, exit_reasons.SHRUNK)
    # Never below its minimum, never worker 0 (it hosts the rendezvous), never one already gone.
    assert not e.applier.shrink(ShrinkJob(job, (0,), "shrank to 1 worker"))
    assert not e.applier.shrink(ShrinkJob(job, (2,), "shrank to 1 worker"))
    # Grown again, the newcomer takes a number this attempt has not used: worker 2's run directory stays its own.
    e.applier.grow(GrowJob(job, (e.place(2, slot=3),), "grew to 3 workers"), ELASTIC)
    assert e.running(job) == ((0, 1, 3), frozenset(), 3)
    # The workers that are left end well: the job succeeded, the shrunk worker's code is not its.
    for worker in (0, 1, 3):
        e.end(job, worker, 0)
    e.settle()
    assert e.job(job) == (JobState.SUCCEEDED, 0)


def test_a_failed_extra_worker_costs_a_restart_and_the_job_runs_on_until_it_would_go_below_its_minimum(
    db: Database,
) -> None:
    e = Elastic(db)
    spec = JobSpec.create(command=["train"], gpus=1, workers="2:4", max_restarts=3)
    job = e.start(spec, 4)
    assert not e.applier.shrink(ShrinkJob(job, (1, 2, 3), "shrank to 1 worker"))  # below its minimum of 2
    e.end(job, 3, 1)
    e.settle()
    assert e.job(job) == (JobState.RUNNING, 1)
    assert e.events(job, "ran_on") == [
        "worker 3 on node-2 exited with code 1; it runs on with 3 workers (restart 1 of 3)"
    ]
    assert e.running(job) == ((0, 1, 2), frozenset(), 3)
    e.settle()
    assert e.job(job) == (JobState.RUNNING, 1)  # judged once
    e.end(job, 2, 1)
    e.settle()
    assert e.job(job) == (JobState.RUNNING, 2)
    # One more would leave it one worker, below its minimum: the whole job stops and is requeued.
    e.end(job, 1, 1)
    e.settle()
    assert e.executor.killed == [(job, 1, 0)]
    e.end(job, 0, KILLED)
    e.settle()
    assert e.job(job) == (JobState.PENDING, 3)


def test_worker_0_failing_stops_the_whole_elastic_job(db: Database) -> None:
    e = Elastic(db)
    job = e.start(ELASTIC, 3)
    e.end(job, 0, 1)
    e.settle()
    assert sorted(e.executor.killed) == [(job, 1, 1), (job, 1, 2)]
    e.end(job, 1, KILLED)
    e.end(job, 2, KILLED)
    e.settle()
    assert e.job(job) == (JobState.PENDING, 1)
    assert e.events(job, "ran_on") == []


def test_a_failed_extra_worker_with_no_restarts_left_fails_the_job(db: Database) -> None:
    e = Elastic(db)
    job = e.start(JobSpec.create(command=["train"], gpus=1, workers="1:3"), 2)
    e.end(job, 1, 1)
    e.settle()
    assert e.executor.killed == [(job, 1, 0)]
    e.end(job, 0, KILLED)
    e.settle()
    assert e.job(job)[0] is JobState.FAILED


def test_gpu_time_follows_the_width_each_worker_counted_from_its_own_start_to_its_own_end(db: Database) -> None:
    e = Elastic(db)
    began = e.clock.now()
    job = e.start(ELASTIC, 1)
    e.clock.advance(600)
    e.applier.grow(GrowJob(job, (e.place(1),), "grew to 2 workers"), ELASTIC)
    e.clock.advance(300)
    e.applier.shrink(ShrinkJob(job, (1,), "shrank to 1 worker"))
    e.end(job, 1, KILLED)
    e.settle(60)
    e.end(job, 0, 0)
    e.settle(1200)
    assert e.job(job)[0] is JobState.SUCCEEDED
    with db.read() as s:
        spans = accounting_repo.worker_spans(s, began, e.clock.now() + timedelta(seconds=1))
    held = sorted(((sp.finished or e.clock.now()) - sp.started).total_seconds() for sp in spans if sp.job_id == job)
    assert held == [360.0, 2160.0]  # the grown worker 6 minutes; worker 0 the whole 36


def test_a_job_one_of_whose_workers_ended_well_is_finishing_and_never_grown_again(db: Database) -> None:
    # torchrun's agents end together once training is done: the first to exit 0 says the job is on
    # its way out. Grown into the GPU it left, a new agent would wait for a rendezvous that is over.
    e = Elastic(db)
    job = e.start(ELASTIC, 2)
    with db.read() as s:
        assert next(j for j in load_snapshot(s, e.clock.now()).running if j.id == job).may_grow
    e.end(job, 1, 0)
    e.settle()
    assert e.job(job) == (JobState.RUNNING, 0)
    with db.read() as s:
        snapshot = load_snapshot(s, e.clock.now())
    finishing = next(j for j in snapshot.running if j.id == job)
    # Not grown, but not "stopping" either: it may still be preempted, and holds its GPUs as its own.
    assert not finishing.may_grow and not finishing.stopping and [p.worker for p in finishing.placements] == [0]
    assert schedule(snapshot).grows == ()
    # Nor does a grow decided before the worker ended start a newcomer into the ending group.
    assert not e.applier.grow(GrowJob(job, (e.place(2),), "grew to 2 workers"), ELASTIC)
    e.end(job, 0, 0)
    e.settle()
    assert e.job(job)[0] is JobState.SUCCEEDED


def test_a_worker_that_could_not_get_its_image_costs_no_restart_and_holds_growth_a_while(db: Database) -> None:
    e = Elastic(db)
    job = e.start(ELASTIC, 1)
    assert e.applier.grow(GrowJob(job, (e.place(1),), "grew to 2 workers"), ELASTIC)
    e.executor.ended[(job, 1, 1)] = WorkerExit(1, reason=exit_reasons.IMAGE_UNAVAILABLE)
    e.settle()
    assert e.job(job) == (JobState.RUNNING, 0), "no restart: the node could not get the image"
    assert any("no restart" in m for m in e.events(job, "ran_on"))

    def snapshot_job() -> RunningJob:
        with db.read() as s:
            return next(j for j in load_snapshot(s, e.clock.now()).running if j.id == job)

    assert not snapshot_job().may_grow  # not straight back onto a node that could not take it
    e.clock.advance(GROW_HOLD_S + 1)
    assert snapshot_job().may_grow


def test_a_shrunk_worker_whose_sigterm_failed_is_sent_it_again(db: Database) -> None:
    e = Elastic(db)
    job = e.start(ELASTIC, 2)
    failing = {"left": 1}
    signal = e.executor.kill

    def flaky(node: str, handle: WorkerHandle) -> None:
        if failing["left"]:
            failing["left"] -= 1
            raise OSError("the node did not answer")
        signal(node, handle)

    e.executor.kill = flaky  # type: ignore[method-assign]
    assert e.applier.shrink(ShrinkJob(job, (1,), "shrank to 1 worker"))
    assert e.executor.killed == []
    with db.tx() as s:
        again = job_repo.stopping(s)
    assert job in again  # the reap step settles it every cycle while it is leaving ...
    e.monitor.settle(again)  # ... as it does here
    assert [k[2] for k in e.executor.killed] == [1]


def test_the_job_shows_the_workers_it_runs_on_and_the_logs_of_a_shrunk_one_stay_readable(db: Database) -> None:
    e = Elastic(db)
    job = e.start(ELASTIC, 3)
    assert e.applier.shrink(ShrinkJob(job, (2,), "shrank to 2 workers"))
    with db.read() as s:
        assert [p.worker for p in job_repo.get_job(s, job).placements] == [0, 1]  # 2/1:3, not 3/1:3
        assert worker_repo.worker_node(s, job, 2) == e.place(2).node  # where its log stays
        assert worker_repo.worker_node(s, job, 7) is None

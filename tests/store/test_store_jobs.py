"""Job rows: submissions round-trip exactly, listing, cancelling, reasons, transitions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.exc import StatementError

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.errors import Conflict, NotFound
from gpupool.domain.jobs import JobSpec, JobState, Placement, Priority
from gpupool.domain.launch import WorkerHandle
from gpupool.store import jobs, workers
from gpupool.store.db import Database
from gpupool.store.orm import JobRow
from gpupool.store.transitions import transition_job
from tests.support.store import move


def submit(db: Database, now: datetime, **spec: Any) -> int:
    spec.setdefault("command", ["python", "train.py"])
    with db.tx() as session:
        return jobs.insert_job(session, JobSpec.create(**spec), "alice", now).id


def state_of(db: Database, job_id: int) -> JobState:
    with db.tx() as session:
        return jobs.get_job(session, job_id).state


def event_kinds(db: Database, job_id: int) -> list[str]:
    with db.tx() as session:
        return [e.kind for e in jobs.job_events(session, job_id)]


def start_on_gpu(db: Database, job_id: int, now: datetime) -> None:
    """pending -> starting -> running with one live worker on n1 GPU 0."""
    with db.tx() as session:
        workers.begin_start(session, job_id, (Placement(worker=0, node="n1", gpus=(0,)),), now)
    with db.tx() as session:
        (worker,) = workers.attempt_workers(session, job_id, 1)
        workers.mark_launched(session, worker.id, WorkerHandle(4242, "/runs/4242"), now)
    move(db, job_id, now, JobState.RUNNING)


# --- insert and read back ----------------------------------------------------------------------

FULL_SPEC: dict[str, Any] = {
    "command": ["python", "-m", "train", "--lr", "3e-4", "a b", "ünïcødé", "--flag="],
    "name": "résumé-run",
    "project": "vision.team_2",
    "gpus": 0.25,
    "workers": 1,
    "cpus": 6,
    "memory": "1.5G",
    "priority": "interactive",
    "max_restarts": 3,
    "env": {"HF_HOME": "/data/hf", "QUOTED": "say \"hi\" 'there'", "EMPTY": "", "LAMBDA": "λ=1"},
    "workdir": "/home/alice/project",
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "max_runtime_s": 86_400,
    "gpu_memory": "20G",
    "checkpoint_dir": "/data/ckpt/résumé run",
    "expose": 8888,
    "image": "nvcr.io/nvidia/pytorch:24.10-py3@sha256:abababababababababababababababababababababababababababababababab",
    "gpu_power": "400W",
}
# What only the service layer sets on a replica's spec (JobSpec.create takes none of it).
REPLICA_FIELDS: dict[str, Any] = {"service": "web", "port_env": "MODEL_PORT"}


def full_spec(spec: dict[str, Any]) -> JobSpec:
    made = JobSpec.create(**spec)
    return replace(made, **REPLICA_FIELDS) if spec is FULL_SPEC else made


@pytest.mark.parametrize(
    "spec",
    [
        FULL_SPEC,
        {"command": ["sleep", "1"]},  # every default
        {"command": ["./run.sh"], "gpus": 8, "workers": 16, "priority": "inference", "cpus": 0},
        {"command": ["x"], "gpus": 0.001},
        {"command": ["x"], "gpus": 0},
        {"command": ["torchrun", "t.py"], "gpus": 4, "workers": "2:8"},  # elastic (issue 35)
    ],
    ids=["every-field", "defaults", "gang", "smallest-share", "cpu-only", "elastic"],
)
def test_insert_and_get_round_trip_every_field(db: Database, now: datetime, spec: dict[str, Any]) -> None:
    created = full_spec(spec)
    with db.tx() as session:
        inserted = jobs.insert_job(session, created, "alice", now)
    with db.tx() as session:
        got = jobs.get_job(session, inserted.id)
    assert got.spec == created
    assert type(got.spec.command) is tuple and type(got.spec.gpus) is float
    assert got.spec.priority is created.priority
    assert got == inserted
    assert (got.owner, got.state, got.placements) == ("alice", JobState.PENDING, ())
    assert (got.starts, got.restarts, got.preempted, got.cancel_requested) == (0, 0, False, False)
    assert got.reason_code == "new" and got.reason
    assert (got.started_at, got.finished_at, got.exit_code) == (None, None, None)


def test_every_field_example_really_sets_every_field() -> None:
    """The round trip above is only as good as its examples: nothing in them may be a default (the
    elastic range, which a fractional GPU rules out, is the elastic example's)."""
    full = full_spec(FULL_SPEC)
    default = JobSpec.create(command=["other"])
    same = [f for f in JobSpec.__slots__ if getattr(full, f) == getattr(default, f) and f != "workers"]
    if "max_workers" in same and JobSpec.create(command=["x"], gpus=4, workers="2:8").max_workers == 8:
        same.remove("max_workers")
    assert same == []
    assert full.priority is Priority.INTERACTIVE and full.memory_mib == 1536


def test_datetimes_come_back_aware_utc_with_microseconds(db: Database, now: datetime) -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    local = now.astimezone(ist)
    job_id = submit(db, local)
    with db.tx() as session:
        got = jobs.get_job(session, job_id)
        (submitted,) = jobs.job_events(session, job_id)
    for value in (got.submitted_at, submitted.time):
        assert value == now
        assert value.tzinfo is not None and value.utcoffset() == timedelta(0)
        assert value.microsecond == now.microsecond
        assert (value.hour, value.minute) == (now.hour, now.minute)


def test_naive_datetimes_are_refused(db: Database) -> None:
    with pytest.raises(StatementError, match="naive datetime"), db.tx() as session:
        jobs.insert_job(session, JobSpec.create(command=["x"]), "alice", datetime(2026, 1, 1))
    with db.tx() as session:
        assert session.scalars(select(JobRow)).first() is None


def test_insert_records_a_submitted_event(db: Database, now: datetime) -> None:
    job_id = submit(db, now, gpus=2, workers=3, project="nlp")
    with db.tx() as session:
        (ev,) = jobs.job_events(session, job_id)
    assert (ev.kind, ev.job_id, ev.time) == ("submitted", job_id, now)
    assert "alice" in ev.message and "nlp" in ev.message and "3 × 2 GPU" in ev.message


def test_unknown_job_is_not_found(db: Database) -> None:
    with db.tx() as session, pytest.raises(NotFound) as info:
        jobs.get_job(session, 999)
    assert info.value.code == "job_not_found"


# --- listing -----------------------------------------------------------------------------------


def test_list_jobs_active_by_default_and_all_on_request(db: Database, now: datetime) -> None:
    paths: dict[str, tuple[JobState, ...]] = {
        "pending": (),
        "starting": (JobState.STARTING,),
        "running": (JobState.STARTING, JobState.RUNNING),
        "succeeded": (JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED),
        "failed": (JobState.STARTING, JobState.FAILED),
        "cancelled": (JobState.CANCELLED,),
        "preempted": (JobState.STARTING, JobState.RUNNING, JobState.PREEMPTED),
        "lost": (JobState.STARTING, JobState.LOST),
    }
    ids = {}
    for name, path in paths.items():
        ids[name] = submit(db, now, name=name)
        move(db, ids[name], now, *path)
    with db.tx() as session:
        active = jobs.list_jobs(session, include_finished=False)
        everything = jobs.list_jobs(session, include_finished=True)
        latest_two = jobs.list_jobs(session, include_finished=True, limit=2)
    assert [(j.spec.name, j.state.value) for j in active] == [
        (n, n) for n in ("pending", "starting", "running", "preempted", "lost")
    ]
    assert [j.id for j in everything] == sorted(ids.values())
    assert {j.spec.name: j.state.value for j in everything} == {n: n for n in paths}
    assert [j.id for j in latest_two] == [ids["preempted"], ids["lost"]]


def test_list_jobs_carries_current_placements(db: Database, now: datetime) -> None:
    running = submit(db, now)
    idle = submit(db, now)
    start_on_gpu(db, running, now)
    with db.tx() as session:
        listed = {j.id: j for j in jobs.list_jobs(session, include_finished=False)}
    assert listed[running].placements == (Placement(worker=0, node="n1", gpus=(0,)),)
    assert listed[idle].placements == ()


# --- cancelling --------------------------------------------------------------------------------


def test_cancel_pending_job_cancels_it_at_once(db: Database, now: datetime) -> None:
    job_id = submit(db, now)
    later = now + timedelta(seconds=5)
    with db.tx() as session:
        got = jobs.request_cancel(session, job_id, later, by="bob")
    assert got.state is JobState.CANCELLED
    assert got.finished_at == later
    assert got.cancel_requested is False
    assert (got.reason_code, got.reason) == (None, None)
    assert event_kinds(db, job_id) == ["submitted", "cancelled"]
    with db.tx() as session:
        assert "bob" in jobs.job_events(session, job_id)[-1].message


def test_cancel_preempted_job_without_workers_goes_through_pending(db: Database, now: datetime) -> None:
    job_id = submit(db, now)
    start_on_gpu(db, job_id, now)
    with db.tx() as session:
        (worker,) = workers.live_workers(session)
        workers.record_exit(session, worker.id, -15, lost=False, now=now)
    move(db, job_id, now, JobState.PREEMPTED)
    with db.tx() as session:
        assert jobs.request_cancel(session, job_id, now, by="bob").state is JobState.CANCELLED
    assert event_kinds(db, job_id)[-2:] == ["pending", "cancelled"]


def test_cancel_job_with_live_workers_only_requests_it(db: Database, now: datetime) -> None:
    job_id = submit(db, now)
    start_on_gpu(db, job_id, now)
    with db.tx() as session:
        got = jobs.request_cancel(session, job_id, now, by="bob")
    assert got.state is JobState.RUNNING
    assert got.cancel_requested is True
    assert got.finished_at is None
    assert event_kinds(db, job_id)[-1] == "cancel_requested"
    # Asking again changes nothing and records nothing new.
    before = event_kinds(db, job_id)
    with db.tx() as session:
        again = jobs.request_cancel(session, job_id, now, by="carol")
    assert (again.state, again.cancel_requested) == (JobState.RUNNING, True)
    assert event_kinds(db, job_id) == before


def test_cancel_preempted_job_whose_workers_still_run_only_requests_it(db: Database, now: datetime) -> None:
    job_id = submit(db, now)
    start_on_gpu(db, job_id, now)
    move(db, job_id, now, JobState.PREEMPTED)  # its worker has not exited yet
    with db.tx() as session:
        got = jobs.request_cancel(session, job_id, now, by="bob")
    assert (got.state, got.cancel_requested) == (JobState.PREEMPTED, True)


@pytest.mark.parametrize("final", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED])
def test_cancel_finished_job_is_a_conflict(db: Database, now: datetime, final: JobState) -> None:
    job_id = submit(db, now)
    path = (JobState.CANCELLED,) if final is JobState.CANCELLED else (JobState.STARTING, JobState.RUNNING, final)
    move(db, job_id, now, *path)
    before = event_kinds(db, job_id)
    with pytest.raises(Conflict) as info, db.tx() as session:
        jobs.request_cancel(session, job_id, now, by="bob")
    assert info.value.code == "job_finished"
    assert final.value in info.value.message
    assert state_of(db, job_id) is final
    assert event_kinds(db, job_id) == before


def test_cancel_unknown_job_is_not_found(db: Database, now: datetime) -> None:
    with pytest.raises(NotFound), db.tx() as session:
        jobs.request_cancel(session, 12345, now, by="bob")


# --- transitions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ((), JobState.RUNNING),
        ((), JobState.SUCCEEDED),
        ((), JobState.PREEMPTED),
        ((JobState.STARTING, JobState.RUNNING), JobState.STARTING),
        ((JobState.CANCELLED,), JobState.PENDING),
        ((JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED), JobState.RUNNING),
        ((JobState.STARTING, JobState.LOST), JobState.RUNNING),
    ],
)
def test_illegal_transition_is_refused_and_leaves_no_trace(
    db: Database, now: datetime, path: tuple[JobState, ...], illegal: JobState
) -> None:
    job_id = submit(db, now)
    move(db, job_id, now, *path)
    before = event_kinds(db, job_id)
    current = state_of(db, job_id)
    with pytest.raises(Conflict) as info, db.tx() as session:
        transition_job(session, jobs.job_row(session, job_id), illegal, now, "nope")
    assert info.value.code == "invalid_state"
    assert current.value in info.value.message and illegal.value in info.value.message
    assert state_of(db, job_id) is current
    assert event_kinds(db, job_id) == before


def test_legal_transitions_set_fields_and_record_events(db: Database, now: datetime) -> None:
    job_id = submit(db, now)
    t1, t2, t3 = (now + timedelta(minutes=m) for m in (1, 2, 3))
    move(db, job_id, t1, JobState.STARTING)
    with db.tx() as session:
        got = jobs.get_job(session, job_id)
    assert (got.state, got.starts, got.reason_code, got.reason) == (JobState.STARTING, 1, None, None)
    move(db, job_id, t2, JobState.RUNNING)
    with db.tx() as session:
        got = jobs.get_job(session, job_id)
    assert (got.state, got.started_at) == (JobState.RUNNING, t2)
    move(db, job_id, t3, JobState.PENDING)
    with db.tx() as session:
        got = jobs.get_job(session, job_id)
        events = jobs.job_events(session, job_id)
    assert (got.state, got.reason_code, got.reason) == (JobState.PENDING, "requeued", "test: to pending")
    assert [(e.kind, e.time) for e in events] == [
        ("submitted", now),
        ("starting", t1),
        ("running", t2),
        ("pending", t3),
    ]
    assert events[-1].message == "test: to pending"
    move(db, job_id, t3, JobState.STARTING, JobState.RUNNING, JobState.FAILED)
    with db.tx() as session:
        got = jobs.get_job(session, job_id)
    assert (got.state, got.starts, got.finished_at) == (JobState.FAILED, 2, t3)


# --- reasons -----------------------------------------------------------------------------------


@contextmanager
def job_updates(db: Database) -> Iterator[list[int]]:
    """Counts the job rows that UPDATE statements touch while the block runs."""
    touched: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("UPDATE JOBS"):
            touched.append(len(params) if executemany else 1)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield touched
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


def test_set_reasons_writes_only_what_changed(db: Database, now: datetime) -> None:
    a, b, c = (submit(db, now) for _ in range(3))
    busy = Reason(ReasonCode.RESOURCES, "needs 1 GPU; 0 of 8 free")
    gang = Reason(ReasonCode.GANG, "needs 4 workers at once")
    with job_updates(db) as touched, db.tx() as session:
        jobs.set_reasons(session, {a: busy, b: busy, c: gang})
    assert sum(touched) == 3
    with job_updates(db) as touched, db.tx() as session:
        jobs.set_reasons(session, {a: busy, b: busy, c: gang})
    assert sum(touched) == 0, "an unchanged queue must cost no writes"
    with job_updates(db) as touched, db.tx() as session:
        jobs.set_reasons(session, {a: busy, b: gang, c: gang})
    assert sum(touched) == 1
    with db.tx() as session:
        got = {j: jobs.get_job(session, j) for j in (a, b, c)}
    assert (got[a].reason_code, got[a].reason) == ("resources", busy.message)
    assert (got[b].reason_code, got[b].reason) == ("gang", gang.message)
    assert (got[c].reason_code, got[c].reason) == ("gang", gang.message)


def test_set_reasons_leaves_jobs_that_are_no_longer_pending(db: Database, now: datetime) -> None:
    pending = submit(db, now)
    started = submit(db, now)
    move(db, started, now, JobState.STARTING)
    reason = Reason(ReasonCode.PRIORITY, "behind higher-priority jobs")
    with db.tx() as session:
        jobs.set_reasons(session, {pending: reason, started: reason, 9999: reason})
    with db.tx() as session:
        assert jobs.get_job(session, pending).reason_code == "priority"
        assert jobs.get_job(session, started).reason_code is None
    with job_updates(db) as touched, db.tx() as session:
        jobs.set_reasons(session, {})
    assert touched == []


def test_first_waiting_for_gpus_is_the_oldest_job_of_those_priorities_held_for_gpus(
    db: Database, now: datetime
) -> None:
    with db.tx() as s:
        quota = jobs.insert_job(s, JobSpec.create(command=["a"]), "alice", now).id
        train = jobs.insert_job(s, JobSpec.create(command=["b"]), "alice", now).id
        urgent = jobs.insert_job(s, JobSpec.create(command=["c"], priority="interactive"), "alice", now).id
        jobs.set_reasons(
            s,
            {
                quota: Reason(ReasonCode.QUOTA, "quota"),  # free GPUs would not help it
                train: Reason(ReasonCode.RESOURCES, "needs 1 GPU"),
                urgent: Reason(ReasonCode.GANG, "gang"),
            },
        )
    with db.read() as s:
        assert jobs.first_waiting_for_gpus(s, ["train", "interactive", "inference"]) == train
        assert jobs.first_waiting_for_gpus(s, ["interactive", "inference"]) == urgent
        assert jobs.first_waiting_for_gpus(s, ["inference"]) is None

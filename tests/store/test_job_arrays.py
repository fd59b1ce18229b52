"""Job arrays and batches (issue 16) over a real store, on SQLite and PostgreSQL: one request makes
an array, accepted as one record whose other tasks are written once, before they are scheduled or
listed (issue 36), each task is a job told its index, ``%N`` caps how many run at
once (the others wait with reason ``array_limit``), and a cancel of the array ends them all."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest
from sqlalchemy import select, update

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.arrays import ArraySpec, parse_job_ref
from gpupool.domain.errors import Conflict, Forbidden, InvalidInput, NotFound, Unsatisfiable
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import arrays as array_repo
from gpupool.store import bulk
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.orm import JobRow
from gpupool.store.tokens import Principal
from gpupool.usecases import arrays as array_service
from gpupool.usecases import jobs as job_service
from gpupool.usecases import metrics
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit
from tests.support.executor import FakeExecutor

ALICE = Principal("alice", "member")
BOB = Principal("bob", "member")
QUIET = ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf)


def make(db: Database, gpus: int) -> tuple[HeadContext, Controller, FakeExecutor, FakeClock]:
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, gpus))
    controller = Controller(db, executor, clock, SchedulerConfig(), QUIET)
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    return HeadContext(db, clock, executor, controller.wake), controller, executor, clock


def states(ctx: HeadContext, array_id: int) -> dict[str, int]:
    return array_service.show(ctx, array_id, ALICE)[0].by_state


def test_an_array_is_its_tasks_each_told_its_index_and_capped_by_its_max_running(db: Database) -> None:
    ctx, controller, executor, clock = make(db, gpus=4)
    spec = JobSpec.create(command=["train"], gpus=1)
    made, replayed = GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-8:2%2"), ALICE)
    assert not replayed and made.tasks == 5 and made.max_running == 2
    array_id = made.first.id
    _, tasks, sees = array_service.show(ctx, array_id, ALICE)
    assert sees and [t.array_index for t in tasks] == [0, 2, 4, 6, 8]
    assert {t.array_id for t in tasks} == {array_id} and tasks[0].id == array_id
    controller.tick()
    assert states(ctx, array_id) == {"running": 2, "pending": 3}  # 4 GPUs free, but %2
    waiting = job_service.why(ctx, tasks[2].id)
    assert waiting.code == "array_limit" and "at most 2 tasks at once" in waiting.message
    envs = {r.env["GPUPOOL_ARRAY_INDEX"]: r.env for _, r in executor.launched}
    assert set(envs) == {"0", "2"}
    assert envs["2"]["GPUPOOL_ARRAY_ID"] == str(array_id) and envs["2"]["GPUPOOL_ARRAY_COUNT"] == "5"
    assert envs["2"]["GPUPOOL_JOB_ID"] == str(tasks[1].id)

    executor.exit(tasks[0].id, 0)
    clock.advance(1)
    controller.tick()
    controller.tick()
    assert states(ctx, array_id) == {"succeeded": 1, "running": 2, "pending": 2}
    assert array_service.task(ctx, array_id, 4) == tasks[2].id
    with pytest.raises(NotFound, match="has no task 5"):
        array_service.task(ctx, array_id, 5)

    with pytest.raises(Forbidden):
        array_service.cancel(ctx, array_id, BOB)
    after, cancelled = array_service.cancel(ctx, array_id, ALICE)
    assert cancelled == 4  # two pending ended at once, two running asked to stop
    assert after.by_state == {"succeeded": 1, "cancelled": 2, "running": 2}
    assert all(job_service.get(ctx, t.id).cancel_requested for t in tasks[1:3])


def test_a_task_of_a_plain_job_submit_and_a_plain_job_are_told_apart(db: Database) -> None:
    ctx, *_ = make(db, gpus=2)
    plain = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=1), ALICE)
    assert plain.array_id is None and plain.array_index is None
    with pytest.raises(NotFound, match=f"no array {plain.id}"):
        array_service.show(ctx, plain.id, ALICE)
    arrays, total = array_service.listing(ctx, BOB, include_finished=False)
    assert (arrays, total) == ([], 0)
    made, _ = GroupCommit(ctx).submit_array(JobSpec.create(command=["x"], gpus=1), ArraySpec.parse("3"), ALICE)
    arrays, total = array_service.listing(ctx, BOB, include_finished=False)
    assert total == 1 and arrays[0][0].first.id == made.first.id and not arrays[0][1]  # Bob sees not inside


def test_an_array_with_a_key_is_made_once(db: Database) -> None:
    ctx, *_ = make(db, gpus=2)
    spec = JobSpec.create(command=["x"], gpus=1)
    first, _ = GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-9"), ALICE, key="k1")
    again, replayed = GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-9"), ALICE, key="k1")
    assert replayed and again.first.id == first.first.id and again.tasks == 10
    assert len(job_service.listing(ctx, ALICE, include_finished=True)[0]) == 10


def test_a_batch_is_all_or_none(db: Database) -> None:
    ctx, *_ = make(db, gpus=2)
    good = JobSpec.create(command=["a"], gpus=1)
    made = GroupCommit(ctx).submit_batch([good, JobSpec.create(command=["b"], gpus=2)], ALICE)
    assert [j.spec.command for j in made] == [("a",), ("b",)]
    assert [job_service.get(ctx, j.id).state for j in made] == [JobState.PENDING] * 2
    with pytest.raises(Unsatisfiable, match=r"^jobs\[1\]: 3 GPUs per worker"):
        GroupCommit(ctx).submit_batch([good, JobSpec.create(command=["c"], gpus=3)], ALICE)
    with pytest.raises(InvalidInput, match="1 to 1000 jobs"):
        GroupCommit(ctx).submit_batch([], ALICE)
    assert len(job_service.listing(ctx, ALICE, include_finished=True)[0]) == 2  # nothing of the refused one


@pytest.mark.parametrize(
    ("text", "indices", "cap"),
    [("0-4", (0, 1, 2, 3, 4), None), ("0-9:3%2", (0, 3, 6, 9), 2), ("7,1,3-4", (1, 3, 4, 7), None), ("5", (5,), None)],
)
def test_array_syntax_is_slurms(text: str, indices: tuple[int, ...], cap: int | None) -> None:
    parsed = ArraySpec.parse(text)
    assert (parsed.indices, parsed.max_running) == (indices, cap)
    assert ArraySpec.parse(str(parsed)) == parsed


@pytest.mark.parametrize("text", ["", "a", "5-1", "0-4:0", "0-4%0", "0-20000", "1-", "0-99999999", "1%x"])
def test_bad_array_syntax_says_what_is_wrong(text: str) -> None:
    with pytest.raises(InvalidInput, match="array"):
        ArraySpec.parse(text)


def test_job_refs() -> None:
    assert parse_job_ref("42") == (42, None) and parse_job_ref("42_7") == (42, 7)
    with pytest.raises(InvalidInput, match="ID_INDEX"):
        parse_job_ref("42_")


def test_a_user_has_at_most_max_user_arrays_in_flight(db: Database) -> None:
    """Issue 30, part 6: arrays with an unfinished task are bounded per user (--max-user-arrays);
    another is refused 409 too_many_arrays, saying how to go on, until one finishes."""
    ctx, controller, _, _ = make(db, gpus=1)
    ctx = dataclasses.replace(ctx, max_user_arrays=2)
    spec = JobSpec.create(command=["train"], gpus=1)
    first, _ = GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-1"), ALICE)
    GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-1"), ALICE)
    with pytest.raises(Conflict) as refused:
        GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-1"), ALICE)
    assert refused.value.code == "too_many_arrays" and "--max-user-arrays 2" in str(refused.value)
    assert "gpupool cancel ID" in str(refused.value)
    GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-1"), BOB)  # another user's count is their own
    job_service.submit(ctx, spec, ALICE)  # plain jobs are not arrays
    array_service.cancel(ctx, first.first.id, ALICE)
    controller.tick()
    again, _ = GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-1"), ALICE)  # one finished: room again
    assert again.tasks == 2


def rows_of(db: Database, array_id: int) -> list[tuple[int, int | None, str | None]]:
    """(job id, index, unmade) of every row the store holds for the array, by index."""
    with db.read() as s:
        query = (
            select(JobRow.id, JobRow.array_index, JobRow.array_unmade)
            .where(JobRow.array_id == array_id)
            .order_by(JobRow.array_index)
        )
        return [(i, index, unmade) for i, index, unmade in s.execute(query)]


def test_an_array_is_accepted_as_one_record_and_its_tasks_are_written_once(db: Database) -> None:
    """Issue 36: the submitter waits for one row (as Slurm keeps an array as one record); the
    others are written after, once, each as if written at the submission."""
    ctx, _, _, clock = make(db, gpus=1)
    spec = JobSpec.create(command=["train"], gpus=1, priority="interactive", env={"SEED": "7"})
    made, _ = GroupCommit(ctx).submit_array(spec, ArraySpec.parse("0-99:2%7"), ALICE)
    assert made.tasks == 50 and made.by_state == {"pending": 50} and made.first.array_index == 0
    assert rows_of(db, made.first.id) == [(made.first.id, 0, "2-98:2")]
    listed, _ = array_service.listing(ctx, ALICE, include_finished=False)  # counts: no write needed
    assert listed[0][0].tasks == 50 and listed[0][0].by_state == {"pending": 50}
    assert len(rows_of(db, made.first.id)) == 1
    submitted_at = clock.now()
    clock.advance(30)
    both = []
    threads = [threading.Thread(target=lambda: both.append(job_service.make_array_tasks(db))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(both) == [0, 49]  # two makers at once: one writes them, the other finds them written
    rows = rows_of(db, made.first.id)
    assert [index for _, index, _ in rows] == list(range(0, 100, 2)) and {u for *_, u in rows} == {None}
    tasks = array_service.show(ctx, made.first.id, ALICE)[1]
    assert all(
        (t.spec, t.owner, t.submitted_at, t.state) == (spec, "alice", submitted_at, JobState.PENDING) for t in tasks
    )
    assert {t.array_id for t in tasks} == {made.first.id}
    for task in tasks[:2] + tasks[-1:]:
        submitted = [e for e in job_service.show(ctx, task.id, ALICE)[2] if e.kind == "submitted"]
        assert len(submitted) == 1 and submitted[0].time == submitted_at
        assert f"as task {task.array_index} of array {made.first.id}" in submitted[0].message
    assert job_service.make_array_tasks(db) == 0


def test_the_controller_writes_an_arrays_tasks_before_the_cycle_that_schedules_them(db: Database) -> None:
    ctx, controller, executor, _ = make(db, gpus=4)
    made, _ = GroupCommit(ctx).submit_array(JobSpec.create(command=["x"], gpus=1), ArraySpec.parse("0-5"), ALICE)
    assert len(rows_of(db, made.first.id)) == 1
    controller.tick()
    assert states(ctx, made.first.id) == {"running": 4, "pending": 2}
    envs = [r.env for _, r in executor.launched]
    assert sorted(e["GPUPOOL_ARRAY_INDEX"] for e in envs) == ["0", "1", "2", "3"]
    assert {e["GPUPOOL_ARRAY_COUNT"] for e in envs} == {"6"}


@pytest.mark.parametrize("read", ["show", "task", "jobs", "job", "cancel"])
def test_a_read_that_lists_or_looks_up_tasks_sees_those_not_written_yet(db: Database, read: str) -> None:
    """Before the controller's next cycle, every read that names tasks finds them all."""
    ctx, *_ = make(db, gpus=1)
    made, _ = GroupCommit(ctx).submit_array(JobSpec.create(command=["x"], gpus=1), ArraySpec.parse("0-9"), ALICE)
    array_id = made.first.id
    if read == "show":
        assert len(array_service.show(ctx, array_id, ALICE)[1]) == 10
    elif read == "task":
        assert array_service.task(ctx, array_id, 9) == rows_of(db, array_id)[-1][0]
    elif read == "jobs":
        assert len(job_service.listing(ctx, ALICE, include_finished=False)[0]) == 10
    elif read == "job":  # the id a task will have, guessed: found, not a 404
        assert job_service.show(ctx, array_id + 9, ALICE)[0].array_index == 9
    else:
        assert array_service.cancel(ctx, array_id, ALICE)[1] == 10
        assert states(ctx, array_id) == {"cancelled": 10}
    assert len(rows_of(db, array_id)) == 10


def test_an_array_whose_tasks_cannot_be_written_does_not_stop_the_pool(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    ctx, controller, _, _ = make(db, gpus=2)
    made, _ = GroupCommit(ctx).submit_array(JobSpec.create(command=["x"], gpus=1), ArraySpec.parse("0-3"), ALICE)
    with db.tx() as s:  # damaged (by hand, or by a bug): its tasks cannot be written
        s.execute(update(JobRow).where(JobRow.id == made.first.id).values(array_unmade="1-3-5"))
    plain = job_service.submit(ctx, JobSpec.create(command=["y"], gpus=1), BOB)
    controller.tick()
    assert job_service.get(ctx, plain.id).state == JobState.RUNNING  # the pool goes on
    assert job_service.get(ctx, made.first.id).state == JobState.RUNNING
    assert "could not write the tasks of an array" in caplog.text
    with db.tx() as s:
        s.execute(update(JobRow).where(JobRow.id == made.first.id).values(array_unmade="1-3"))
    controller.tick()  # mended: the next cycle writes them
    assert len(rows_of(db, made.first.id)) == 4


def test_in_the_transaction_that_writes_the_tasks_the_array_counts_each_once(db: Database) -> None:
    ctx, *_ = make(db, gpus=1)
    made, _ = GroupCommit(ctx).submit_array(JobSpec.create(command=["x"], gpus=1), ArraySpec.parse("0-4"), ALICE)
    with db.tx() as s:
        assert array_repo.summary(s, made.first.id).tasks == 5  # loads the first task, unmade
        assert bulk.make_tasks(s) == 4
        assert array_repo.summary(s, made.first.id).by_state == {"pending": 5}


def test_one_head_counts_a_users_arrays_only_near_their_limit(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: a head carries each user's arrays in flight from group to group (a bound: arrays
    enter flight only by submission), and counts them in the store again only where the bound
    would refuse: once a task-heavy count per array, 0.5-3 ms with thousands of tasks waiting."""
    ctx, controller, _, _ = make(db, gpus=1)
    ctx = dataclasses.replace(ctx, max_user_arrays=3)
    counted: list[str] = []
    count = array_repo.count_unfinished
    monkeypatch.setattr(array_repo, "count_unfinished", lambda s, user: counted.append(user) or count(s, user))
    group, spec = GroupCommit(ctx), JobSpec.create(command=["train"], gpus=1)
    first, _ = group.submit_array(spec, ArraySpec.parse("0-1"), ALICE)
    group.submit_array(spec, ArraySpec.parse("0-1"), ALICE)
    group.submit_array(spec, ArraySpec.parse("0-1"), ALICE)
    assert counted == ["alice"]  # the first only: then 1 and 2 in flight are known bounds under 3
    with pytest.raises(Conflict, match="alice has 3 arrays"):
        group.submit_array(spec, ArraySpec.parse("0-1"), ALICE)
    assert counted == ["alice", "alice"]  # at the bound: counted again before refusing
    array_service.cancel(ctx, first.first.id, ALICE)
    controller.tick()
    again, _ = group.submit_array(spec, ArraySpec.parse("0-1"), ALICE)  # counted again: 2, room for one
    assert again.tasks == 2 and counted == ["alice"] * 3
    with pytest.raises(Conflict, match="alice has 3 arrays"):
        group.submit_array(spec, ArraySpec.parse("0-1"), ALICE)


def test_the_job_counts_of_metrics_hold_the_tasks_not_written_yet(db: Database) -> None:
    ctx, _, _, clock = make(db, gpus=1)
    GroupCommit(ctx).submit_array(JobSpec.create(command=["x"], gpus=1), ArraySpec.parse("0-9"), ALICE)
    figures = metrics.read(db, clock.now(), idle_after_s=60)
    assert figures.jobs[("pending", "default")] == 10  # one row so far, ten pending tasks
    job_service.make_array_tasks(db)
    assert metrics.read(db, clock.now(), idle_after_s=60).jobs[("pending", "default")] == 10

"""Group commit of submissions (issue 16) on SQLite and PostgreSQL: submissions that arrive
together share a transaction, yet each is answered on its own — a refused one does not take the
others down, and a key sent twice in one group makes one job."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

import pytest

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.errors import Conflict, NotFound, Unsatisfiable
from gpupool.domain.jobs import JobSpec
from gpupool.domain.nodes import Node
from gpupool.domain.records import ArraySummary
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit, _Submission
from gpupool.usecases.submission import Array, Batch, Job

ADMIN = Principal("admin", "admin")
ONE = JobSpec.create(command=["x"], gpus=1)


def test_a_lone_submission_is_committed_at_once_and_answered(ctx: HeadContext) -> None:
    group = GroupCommit(ctx)
    job, replayed = group.submit(ONE, ADMIN, None)
    assert not replayed and job_service.get(ctx, job.id).spec == ONE
    assert (group.groups, group.submissions) == (1, 1)


def test_concurrent_submissions_share_commits_and_each_gets_its_own_job(ctx: HeadContext) -> None:
    group = GroupCommit(ctx)
    made: list[int] = []
    start = threading.Barrier(8)

    def client() -> None:
        start.wait()
        for _ in range(25):
            made.append(group.submit(ONE, ADMIN, str(uuid.uuid4()))[0].id)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == len(set(made)) == 200
    listed = {j.id for j, _ in job_service.listing(ctx, ADMIN, include_finished=True)[0]}
    assert listed == set(made)
    assert group.submissions == 200 and group.groups <= 200


def test_in_one_group_a_refused_submission_is_answered_alone_and_a_repeated_key_makes_one_job(
    ctx: HeadContext,
) -> None:
    """Drive one group by hand: what a leader commits when these five arrived together."""
    group = GroupCommit(ctx)
    stranger = Principal("eve", "member")
    batch = [
        _Submission(Job(ONE), ADMIN, "k"),
        _Submission(Job(JobSpec.create(command=["x"], gpus=8)), ADMIN, None),  # the node has 2 GPUs
        _Submission(Job(JobSpec.create(command=["x"], gpus=1, project="nope")), stranger, None),  # no such project
        _Submission(Job(ONE), ADMIN, "k"),  # the same request again: the first one's job
        _Submission(Job(JobSpec.create(command=["y"], gpus=1)), ADMIN, "k"),  # the key, another request: 409
    ]
    group._commit(batch)
    job, replayed = batch[0].outcome()
    assert not replayed
    with pytest.raises(Unsatisfiable):
        batch[1].outcome()
    with pytest.raises(NotFound, match="nope"):
        batch[2].outcome()
    assert batch[3].outcome() == (job, True)
    with pytest.raises(Conflict, match="different submission"):
        batch[4].outcome()
    assert [j.id for j, _ in job_service.listing(ctx, ADMIN, include_finished=True)[0]] == [job.id]
    again = GroupCommit(ctx).submit(ONE, ADMIN, "k")  # a later group finds the key in the store
    assert again[0].id == job.id and again[1]


def test_jobs_batches_and_arrays_arriving_together_share_a_group_and_its_checks(ctx: HeadContext) -> None:
    """Every way in meets the same checks in one transaction: a batch is one submission, all or
    none; an array counts against --max-user-arrays with the arrays before it in its group; an
    array's key is replayed from the group as a job's is."""
    capped = replace(ctx, max_user_arrays=1)
    group = GroupCommit(capped)
    two = ArraySpec.parse("0-1")
    batch = [
        _Submission(Array(ONE, two), ADMIN, "a"),
        _Submission(Batch((ONE, ONE)), ADMIN, None),
        _Submission(Batch((ONE, JobSpec.create(command=["x"], gpus=3))), ADMIN, None),  # the node has 2 GPUs
        _Submission(Job(ONE), ADMIN, None),
        _Submission(Array(ONE, two), ADMIN, "a"),  # the same request again: the first one's array
        _Submission(Array(ONE, ArraySpec.parse("0-2")), ADMIN, None),  # a second array in flight: 409
    ]
    group._commit(batch)
    array, replayed = batch[0].outcome()
    assert isinstance(array, ArraySummary) and array.tasks == 2 and not replayed
    jobs, _ = batch[1].outcome()
    assert isinstance(jobs, list) and [j.spec for j in jobs] == [ONE, ONE]
    with pytest.raises(Unsatisfiable, match=r"^jobs\[1\]: 3 GPUs per worker"):
        batch[2].outcome()
    job, _ = batch[3].outcome()
    assert batch[4].outcome() == (array, True)
    with pytest.raises(Conflict) as refused:
        batch[5].outcome()
    assert refused.value.code == "too_many_arrays"
    listed = {j.id for j, _ in job_service.listing(ctx, ADMIN, include_finished=True)[0]}
    assert listed == {array.first.id, array.first.id + 1} | {j.id for j in jobs} | {job.id}
    assert group.groups == 1
    again, replayed = GroupCommit(capped).submit_array(ONE, two, ADMIN, "a")  # a later group finds the key
    assert again.first.id == array.first.id and replayed


def test_a_node_that_joins_is_seen_by_the_next_submission(ctx: HeadContext) -> None:
    """The nodes a submission is checked against are kept between groups, but not past a change."""
    from gpupool.sim.cluster import uniform
    from gpupool.store import nodes as node_repo

    group = GroupCommit(ctx)
    wide = JobSpec.create(command=["x"], gpus=4)
    with pytest.raises(Unsatisfiable):
        group.submit(wide, ADMIN, None)
    with ctx.db.tx() as s:
        node_repo.register_nodes(s, [*node_repo.load_nodes(s), *_renamed(uniform(1, 4), "big")], ctx.clock.now())
    job, _ = group.submit(wide, ADMIN, None)
    assert job.spec.gpus == 4


def _renamed(nodes: list[Node], name: str) -> list[Node]:
    return [replace(n, name=f"{name}-{i}") for i, n in enumerate(nodes)]


def test_submissions_awaited_on_an_event_loop_are_each_answered_and_committed(ctx: HeadContext) -> None:
    """submit_async: the requests of a burst wait on the loop while a committer thread commits
    their groups; each gets its own job or its own refusal, and one whose caller gave up (a
    cancelled request) is committed all the same."""
    import asyncio

    group = GroupCommit(ctx)

    async def burst() -> tuple[list[object], int]:
        wide = JobSpec.create(command=["x"], gpus=8)  # the node has 2 GPUs
        calls = [group.submit_async(wide if i == 7 else ONE, ADMIN, None) for i in range(40)]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        gone = asyncio.ensure_future(group.submit_async(ONE, ADMIN, "left"))
        await asyncio.sleep(0)  # queued, then its client leaves
        gone.cancel()
        for _ in range(200):
            if group.submissions == 41:
                break
            await asyncio.sleep(0.01)
        return answers, group.submissions

    answers, submitted = asyncio.run(burst())
    assert isinstance(answers[7], Unsatisfiable)
    made = [a[0].id for a in answers if isinstance(a, tuple)]
    assert len(made) == len(set(made)) == 39
    assert submitted == 41
    listed = {j.id for j, _ in job_service.listing(ctx, ADMIN, include_finished=True)[0]}
    assert len(listed) == 40 and set(made) < listed  # the cancelled request's job is there too
    again = group.submit(ONE, ADMIN, "left")
    assert again[1] and again[0].id in listed - set(made)


def test_a_member_removed_is_refused_at_their_next_submission(ctx: HeadContext) -> None:
    """Grants are remembered between groups (SQLite), but a change of membership forgets them."""
    from gpupool.domain.errors import Forbidden
    from gpupool.domain.permissions import ProjectRole
    from gpupool.domain.projects import Project
    from gpupool.domain.users import Role
    from gpupool.usecases import projects as project_service
    from gpupool.usecases import users as user_service

    user_service.add_user(ctx, ADMIN, "ann", Role.MEMBER, None)
    project_service.set_project(ctx, Project.create("vision", quota=1), ADMIN)
    project_service.set_member(ctx, ADMIN, "vision", "ann", ProjectRole.MEMBER)
    ann = Principal("ann", "member")
    group = GroupCommit(ctx)
    spec = JobSpec.create(command=["x"], gpus=1, project="vision")
    made = [group.submit(spec, ann, None)[0].id for _ in range(2)]  # the second from the remembered grant
    project_service.remove_member(ctx, ADMIN, "vision", "ann")
    with pytest.raises(Forbidden, match="may not submit to project vision"):
        group.submit(spec, ann, None)
    project_service.set_member(ctx, ADMIN, "vision", "ann", ProjectRole.MEMBER)
    made.append(group.submit(spec, ann, None)[0].id)
    for job_id in made:
        job_service.cancel(ctx, job_id, ADMIN)
    project_service.delete_project(ctx, "vision", ADMIN)
    with pytest.raises(NotFound, match="no project vision"):
        group.submit(spec, ann, None)


def test_an_awaited_submission_wakes_the_controller_after_its_answer(ctx: HeadContext) -> None:
    """Issue 36: the controller is woken from the loop, behind the request the answer resumes, so
    its cycle (an array's tasks to write) does not hold the interpreter while the answer waits;
    a thread's submission still wakes it at once."""
    import asyncio

    order: list[str] = []
    group = GroupCommit(replace(ctx, wake_controller=lambda: order.append("wake")))

    async def one() -> None:
        made, _ = await group.submit_array_async(ONE, ArraySpec.parse("0-99"), ADMIN)
        order.append(f"answer {made.tasks}")
        await asyncio.sleep(0.05)

    asyncio.run(one())
    assert order == ["answer 100", "wake"]
    order.clear()
    group.submit(ONE, ADMIN)
    assert order == ["wake"]

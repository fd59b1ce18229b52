"""Group commit of submissions (issue 16) on SQLite and PostgreSQL: submissions that arrive
together share a transaction, yet each is answered on its own — a refused one does not take the
others down, and a key sent twice in one group makes one job."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

import pytest

from gpupool.domain.errors import Conflict, NotFound, Unsatisfiable
from gpupool.domain.jobs import JobSpec
from gpupool.domain.nodes import Node
from gpupool.services import jobs as job_service
from gpupool.services.context import HeadContext
from gpupool.services.group_commit import GroupCommit, _Submission
from gpupool.store.idempotency import fingerprint
from gpupool.store.tokens import Principal

ADMIN = Principal("admin", "admin")
ONE = JobSpec.create(command=["x"], gpus=1)


def test_a_lone_submission_is_committed_at_once_and_answered(services: HeadContext) -> None:
    group = GroupCommit(services)
    job, replayed = group.submit(ONE, ADMIN, None)
    assert not replayed and job_service.get(services, job.id).spec == ONE
    assert (group.groups, group.submissions) == (1, 1)


def test_concurrent_submissions_share_commits_and_each_gets_its_own_job(services: HeadContext) -> None:
    group = GroupCommit(services)
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
    listed = {j.id for j, _ in job_service.listing(services, ADMIN, include_finished=True)[0]}
    assert listed == set(made)
    assert group.submissions == 200 and group.groups <= 200


def test_in_one_group_a_refused_submission_is_answered_alone_and_a_repeated_key_makes_one_job(
    services: HeadContext,
) -> None:
    """Drive one group by hand: what a leader commits when these five arrived together."""
    group = GroupCommit(services)
    stranger = Principal("eve", "member")
    batch = [
        _Submission(ONE, ADMIN, "k"),
        _Submission(JobSpec.create(command=["x"], gpus=8), ADMIN, None),  # the node has 2 GPUs
        _Submission(JobSpec.create(command=["x"], gpus=1, project="nope"), stranger, None),  # no such project
        _Submission(ONE, ADMIN, "k"),  # the same request again: the first one's job
        _Submission(JobSpec.create(command=["y"], gpus=1), ADMIN, "k"),  # the key, another request: 409
    ]
    for one in batch:
        one.fingerprint = fingerprint(one.spec.to_dict())
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
    assert [j.id for j, _ in job_service.listing(services, ADMIN, include_finished=True)[0]] == [job.id]
    again = GroupCommit(services).submit(ONE, ADMIN, "k")  # a later group finds the key in the store
    assert again[0].id == job.id and again[1]


def test_a_node_that_joins_is_seen_by_the_next_submission(services: HeadContext) -> None:
    """The nodes a submission is checked against are kept between groups, but not past a change."""
    from gpupool.sim.cluster import uniform
    from gpupool.store import nodes as node_repo

    group = GroupCommit(services)
    wide = JobSpec.create(command=["x"], gpus=4)
    with pytest.raises(Unsatisfiable):
        group.submit(wide, ADMIN, None)
    with services.db.tx() as s:
        node_repo.register_nodes(s, [*node_repo.load_nodes(s), *_renamed(uniform(1, 4), "big")], services.clock.now())
    job, _ = group.submit(wide, ADMIN, None)
    assert job.spec.gpus == 4


def _renamed(nodes: list[Node], name: str) -> list[Node]:
    return [replace(n, name=f"{name}-{i}") for i, n in enumerate(nodes)]

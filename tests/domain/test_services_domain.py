"""Services in the domain: what ``ServiceSpec.create`` refuses, the replica template, the rolling
plan (domain/rollout.py) as a table, and the spread of a service's replicas in the scheduler."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import Priority
from gpupool.domain.rollout import plan
from gpupool.domain.services import Replica, ServiceSpec, ServiceState, service_state
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import SchedulerConfig, schedule
from tests.support.builders import T0, node, pending, running, snapshot


def spec(**kw: object) -> ServiceSpec:
    return ServiceSpec.create(**{"name": "web", "command": ["python", "serve.py"], **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"name": "Web"}, "invalid service name"),
        ({"name": "-web"}, "invalid service name"),
        ({"name": "w" * 64}, "invalid service name"),
        ({"replicas": 65}, "replicas must be a whole number from 0 to 64"),
        ({"replicas": -1}, "replicas must be"),
        ({"min_replicas": 3, "max_replicas": 2}, "must not exceed"),
        ({"replicas": 2, "max_replicas": 3}, "not both"),
        ({"max_concurrency": 0}, "max concurrency"),
        ({"max_concurrency": 10_001}, "max concurrency"),
        ({"max_concurrency": 4, "target_concurrency": 5}, "target concurrency"),
        ({"health_path": "healthz"}, "health path"),
        ({"health_path": "/a b"}, "health path"),
        ({"health_path": "/" + "x" * 300}, "health path"),
        ({"port_env": "1PORT"}, "--port-env"),
        ({"port_env": "P" * 65}, "--port-env"),
        ({"scale_to_zero": True, "min_replicas": 1, "max_replicas": 2}, "scale to zero"),
        ({"command": []}, "empty command"),
        ({"env": {"PORT": "1"}}, "--env sets PORT"),
        ({"timeout_s": 0}, "timeout"),
        ({"queue_limit": -1}, "queue limit"),
    ],
)
def test_bad_input_is_one_clear_error(kw: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        spec(**kw)
    assert says in caught.value.message and "\n" not in caught.value.message


def test_the_replica_is_an_inference_job_that_names_its_service() -> None:
    s = spec(replicas=2, gpus=0, memory="1G", env={"A": "1"}, port_env="HTTP_PORT")
    job = s.replica_spec()
    assert (job.priority, job.service, job.port_env, job.memory_mib, job.project) == (
        Priority.INFERENCE,
        "web",
        "HTTP_PORT",
        1024,
        "default",
    )
    assert ServiceSpec.from_dict(s.to_dict()) == s
    # A change of what runs makes a new version; a change of counts does not.
    assert dataclasses.replace(s, max_replicas=5).replica_spec() == job
    assert dataclasses.replace(s, command=("python", "v2.py")).replica_spec() != job


def test_counts() -> None:
    assert (spec().min_replicas, spec().max_replicas) == (1, 1)
    assert spec(min_replicas=0, max_replicas=3).floor == 1
    assert spec(min_replicas=0, max_replicas=3, scale_to_zero=True).floor == 0
    assert service_state(2, 2) is ServiceState.READY
    assert service_state(2, 1) is ServiceState.DEGRADED
    assert service_state(2, 0) is ServiceState.STARTING
    assert service_state(0, 0) is ServiceState.IDLE


def r(job_id: int, *, ready: bool = True, current: bool = True, stopping: bool = False) -> Replica:
    return Replica(job_id, "running", current, stopping, ready=ready)


@pytest.mark.parametrize(
    ("desired", "replicas", "submit", "stop"),
    [
        (2, [], 2, ()),  # a new service
        (2, [r(1)], 1, ()),  # a replica died: replaced
        (2, [r(1), r(2, stopping=True)], 1, ()),  # one being stopped counts for nothing
        (2, [r(1), r(2)], 0, ()),  # steady
        (1, [r(1), r(2, ready=False), r(3)], 0, (2, 3)),  # scale down: not ready first, then the newest
        (0, [r(1), r(2)], 0, (2, 1)),
        # A rolling update, step by step: surge one, stop an old one only once the new one is ready.
        (2, [r(1, current=False), r(2, current=False)], 1, ()),
        (2, [r(1, current=False), r(2, current=False), r(3, ready=False)], 0, ()),
        (2, [r(1, current=False), r(2, current=False), r(3)], 1, (1,)),  # and the next one starts
        (2, [r(2, current=False), r(3)], 1, ()),
        (2, [r(2, current=False), r(3), r(4)], 0, (2,)),
        # Old replicas that are not ready hold no capacity: stopped at once.
        (2, [r(1, current=False, ready=False), r(2, current=False)], 2, (1,)),
    ],
)
def test_plan(desired: int, replicas: list[Replica], submit: int, stop: tuple[int, ...]) -> None:
    p = plan(desired, replicas)
    assert (p.submit, p.stop) == (submit, stop), p.reason


def test_a_roll_never_leaves_fewer_ready_than_desired() -> None:
    """Simulate a roll of 3 replicas where every new replica becomes ready one round after it is
    submitted: the ready count never falls below 3 and every replica ends on the new version."""
    replicas = {i: r(i, current=False) for i in (1, 2, 3)}
    next_id, rounds = 4, 0
    while any(not x.current for x in replicas.values()) or len(replicas) != 3:
        rounds += 1
        assert rounds < 20
        p = plan(3, list(replicas.values()))
        for job_id in p.stop:
            del replicas[job_id]
        assert sum(x.ready for x in replicas.values()) >= 3
        replicas = {i: dataclasses.replace(x, ready=True) for i, x in replicas.items()}  # yesterday's starters
        for _ in range(p.submit):
            replicas[next_id] = r(next_id, ready=False)
            next_id += 1
    assert sorted(replicas) == [4, 5, 6]


def _replica(job_id: int, service: str | None) -> PendingJob:
    job = pending(job_id, gpus=1, priority="inference")
    return dataclasses.replace(job, spec=dataclasses.replace(job.spec, service=service, port_env="PORT"))


def test_replicas_of_one_service_spread_other_jobs_bin_pack() -> None:
    """Bin-pack puts a second 1-GPU job on the node already used; a second replica of the same
    service goes to the other node instead."""
    nodes = [node("n1"), node("n2")]
    used = running(9, ("n1", (0,)), priority="inference")
    web = RunningJob(9, dataclasses.replace(used.spec, service="web"), used.placements, T0)
    starts = schedule(snapshot(nodes, [_replica(1, "web")], [web]), SchedulerConfig()).starts
    assert [(s.job_id, s.placements[0].node) for s in starts] == [(1, "n2")]
    starts = schedule(snapshot(nodes, [_replica(1, "api")], [web]), SchedulerConfig()).starts
    assert [(s.job_id, s.placements[0].node) for s in starts] == [(1, "n1")]
    # Two replicas started in one cycle also spread; with one node they share it.
    starts = schedule(snapshot(nodes, [_replica(1, "web"), _replica(2, "web")]), SchedulerConfig()).starts
    assert sorted(s.placements[0].node for s in starts) == ["n1", "n2"]
    starts = schedule(snapshot([node("n1")], [_replica(1, "web"), _replica(2, "web")]), SchedulerConfig()).starts
    assert [s.placements[0].node for s in starts] == ["n1", "n1"]

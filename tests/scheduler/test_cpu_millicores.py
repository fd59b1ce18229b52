"""Fractional CPUs, counted as Kubernetes counts them: integer millicores. Whole cores are pinned
to one worker; a fraction shares the node's unpinned cores, and the two never oversubscribe a node."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.resources import parse_cpus, show_cpus
from gpupool.domain.snapshot import RunningJob
from gpupool.domain.worker_env import Rendezvous, worker_env
from gpupool.scheduler import schedule
from gpupool.scheduler.cluster import ClusterState
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.fit import fit_worker
from tests.support.builders import T0, node, pending, snapshot


@pytest.mark.parametrize(
    ("value", "milli"),
    [(0, 0), (2, 2000), (0.5, 500), ("0.5", 500), ("500m", 500), ("1.25", 1250), (3.152, 3152), (" 12 ", 12000)],
)
def test_cpus_are_parsed_to_exact_millicores(value: object, milli: int) -> None:
    assert parse_cpus(value, 4096) == milli


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "0 or more"),
        ("0.0005", "finer than a millicore"),
        ("1.5m", "finer than a millicore"),
        ("lots", "number of cores"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (True, "number of cores"),
        (5000, "at most 4096"),
        ("1e999", "at most 4096"),
        ("9" * 40, "number of cores"),
    ],
)
def test_bad_cpus_are_refused_with_a_message(value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_cpus(value, 4096)


def test_a_thousand_tenths_add_up_to_a_hundred_cores_exactly() -> None:
    specs = [JobSpec.create(command=["x"], cpus=0.1) for _ in range(1000)]
    assert sum(s.cpu_milli for s in specs) == 100_000  # floats: 99.9999999999986
    assert show_cpus(specs[0].cpu_milli) == "0.1" and show_cpus(3152) == "3.152" and show_cpus(2005) == "2.005"


def test_the_submission_asks_for_the_same_millicores_and_old_specs_still_load() -> None:
    for cpus in (0, 2, 0.5, "3152m"):
        spec = JobSpec.create(command=["x"], cpus=cpus)
        assert JobSpec.create(**spec.submission()).cpu_milli == spec.cpu_milli
    old = {**JobSpec.create(command=["x"]).to_dict(), "cpus": 3}
    del old["cpu_milli"]
    assert JobSpec.from_dict(old).cpu_milli == 3000


def test_a_fraction_shares_the_unpinned_cores_and_whole_cores_are_pinned() -> None:
    result = schedule(snapshot([node("n1", 0, cpus=4)], [pending(1, gpus=0, cpus=0.5), pending(2, gpus=0, cpus=3)]))
    placed = {s.job_id: s.placements[0] for s in result.starts}
    assert (placed[1].cpus, placed[1].cpu_milli) == ((0, 1, 2, 3), 500)  # all four unpinned, a quota of 0.5
    assert (placed[2].cpus, placed[2].cpu_milli) == ((0, 1, 2), 0)  # three cores of its own


def test_whole_cores_cannot_be_pinned_out_from_under_the_fractions() -> None:
    """4 cores, 0.5 shared: 3.5 are left. A 4-core job waits; a 3-core job fits and then only 0.5
    stays for fractions on the one unpinned core (0.6 waits, 0.5 starts)."""
    half = Placement(0, "n1", (), cpus=(0, 1, 2, 3), cpu_milli=500)
    shared = RunningJob(9, JobSpec.create(command=["x"], gpus=0, cpus=0.5), (half,), T0)
    result = schedule(snapshot([node("n1", 0, cpus=4)], [pending(1, gpus=0, cpus=4)], [shared]))
    assert not result.starts and "needs 4 free CPU cores on one node; the most free is 3.5" in result.pending[1].message
    queue = [pending(1, gpus=0, cpus=3), pending(2, gpus=0, cpus=0.6), pending(3, gpus=0, cpus=0.5)]
    result = schedule(snapshot([node("n1", 0, cpus=4)], queue, [shared]))
    assert sorted(s.job_id for s in result.starts) == [1, 3]
    assert {s.job_id: s.placements[0].cpus for s in result.starts}[3] == (3,)  # the core left unpinned


def test_a_fraction_runs_one_thread() -> None:
    def threads(cpus: float, placement: Placement) -> str:
        spec = JobSpec.create(command=["x"], cpus=cpus)
        env = worker_env(
            job_id=7, spec=spec, placement=placement, rendezvous=Rendezvous("n1", 1), restarts=0, preempted=False
        )
        return env["OMP_NUM_THREADS"]

    assert threads(0.5, Placement(0, "n1", (), cpus=(0, 1, 2, 3), cpu_milli=500)) == "1"
    assert threads(1.5, Placement(0, "n1", (), cpus=(0, 1, 2, 3), cpu_milli=1500)) == "2"
    assert threads(3, Placement(0, "n1", (), cpus=(4, 5, 6))) == "3"


DEMANDS = st.one_of(st.integers(0, 4).map(lambda c: c * 1000), st.integers(1, 3999).filter(lambda m: m % 1000))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(DEMANDS, st.booleans()), min_size=1, max_size=25))
def test_cpus_are_never_oversubscribed(steps: list[tuple[int, bool]]) -> None:
    """Any mix of pinned and fractional workers started and ended in any order: pinned cores are
    disjoint and pinned cores plus fractions never exceed the node's cores."""
    state = ClusterState(snapshot([node("n1", 0, cpus=6)], []))
    free = state.nodes["n1"]
    held: list[Placement] = []
    for milli, end_one in steps:
        if end_one and held:
            state.give_back(held.pop(0))
            continue
        spec = JobSpec.create(command=["x"], gpus=0, cpus=f"{milli}m")
        p = fit_worker(free, WorkerDemand.of(spec), 0)
        if p is None:
            assert milli > free.free_milli
            continue
        state.take(p)
        held.append(p)
        pinned = [c for q in held if not q.cpu_milli for c in q.cpus]
        assert len(pinned) == len(set(pinned))
        assert len(pinned) * 1000 + sum(q.cpu_milli for q in held) <= 6000
        assert free.free_milli >= 0

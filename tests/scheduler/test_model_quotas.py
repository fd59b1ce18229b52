"""Quotas and limits per GPU model in the scheduler (issue 34 item 2), on a mixed fleet of one
H100 node and one A100 node: a per-model limit caps what a project holds of that model, with or
without ``--gpu-model``; a per-model quota is reclaimed on that model only; without per-model
figures nothing is built and the total rules decide as before."""

from __future__ import annotations

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import RunningJob
from gpupool.scheduler import schedule
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import open_session
from tests.support.builders import node, pending, running, snapshot

FLEET = [node("a1", 4, model="A100"), node("h1", 4, model="H100")]


def _run(jobs: list, projects: list[Project], held: list[RunningJob] | None = None):  # type: ignore[no-untyped-def,type-arg]
    return schedule(snapshot(FLEET, jobs, held, projects))


def _models(result, job_ids: list[int]) -> list[str]:  # type: ignore[no-untyped-def]
    """The model of the node each started job landed on, by job id."""
    on = {s.job_id: s.placements[0].node for s in result.starts}
    return ["H100" if on[i] == "h1" else "A100" for i in job_ids if i in on]


def _holding(project: str, node_name: str, first_id: int, count: int = 4) -> list[RunningJob]:
    return [running(first_id + i, (node_name, (i,)), project=project) for i in range(count)]


@pytest.mark.parametrize(
    ("gpu_model", "limits", "started", "why"),
    [
        # Asking H100: the third waits, the reason naming the model and the option that set it.
        ("H100", {"H100": 2}, 2, "limit: project vision holds 2 of its 2 H100 (--limit H100=2); this job needs 1 more"),
        # Asking H100|A100 with only H100 capped: the rest go to the A100s.
        ("H100|A100", {"H100": 2}, 5, None),
        # Asking nothing, both capped: it waits once every model it could land on is full.
        (
            None,
            {"H100": 2, "A100": 1},
            3,
            "limit: project vision holds 1 of its 1 A100 (--limit A100=1); project vision holds 2 of its 2 H100"
            " (--limit H100=2); this job needs 1 more",
        ),
    ],
)
def test_a_per_model_limit_caps_what_a_project_holds_of_that_model(
    gpu_model: str | None, limits: dict[str, float], started: int, why: str | None
) -> None:
    projects = [Project.create("vision", limit_by_model=limits)]
    jobs = [pending(i, project="vision", gpu_model=gpu_model) for i in range(1, 6)]
    result = _run(jobs, projects)
    assert len(result.starts) == started
    assert _models(result, [1, 2, 3, 4, 5]).count("H100") <= limits["H100"]
    if why is not None:
        assert result.pending[started + 1].code is ReasonCode.LIMIT
        assert result.pending[started + 1].message == why


def test_a_job_without_a_model_counts_against_the_model_it_lands_on() -> None:
    # vision may hold 1 A100 and holds it: its job with no model lands on an H100, whatever the
    # placement would have preferred; nlp, with no per-model figure, lands where it would.
    projects = [Project.create("vision", limit_by_model={"A100": 1}), Project("nlp")]
    held = [running(100, ("a1", (0,)), project="vision")]
    result = _run([pending(1, project="vision"), pending(2, project="nlp")], projects, held)
    assert _models(result, [1]) == ["H100"]
    assert _models(result, [2]) == ["A100"]  # a1 comes first by name, as without per-model figures
    # Once it ran there, it counts against H100: a limit of 1 H100 holds the next one back too.
    capped = [Project.create("vision", limit_by_model={"A100": 1, "H100": 1})]
    on_h100 = [*held, running(101, ("h1", (0,)), project="vision")]
    waits = _run([pending(3, project="vision")], capped, on_h100)
    assert not waits.starts and waits.pending[3].code is ReasonCode.LIMIT


@pytest.mark.parametrize(
    ("gpu_model", "stopped_on"),
    [
        ("H100", ["h1", "h1"]),  # owed H100: only H100 jobs are taken back
        (None, ["h1", "h1"]),  # no model: its per-model quota is for H100, so H100 again
        ("A100", []),  # no A100 quota (and nothing beyond its per-model quotas): nothing taken
    ],
)
def test_a_per_model_quota_is_reclaimed_on_that_model_only(gpu_model: str | None, stopped_on: list[str]) -> None:
    # nlp, with no quota, borrowed the whole fleet; vision is guaranteed 4 H100.
    projects = [Project.create("vision", quota=4, quota_by_model={"H100": 4}), Project("nlp")]
    held = _holding("nlp", "a1", 100) + _holding("nlp", "h1", 200)
    result = _run([pending(i, project="vision", gpu_model=gpu_model) for i in (1, 2)], projects, held)
    node_of = {r.id: r.placements[0].node for r in held}
    assert sorted(node_of[p.job_id] for p in result.preemptions) == stopped_on
    assert not result.starts  # each waits for its GPUs to be freed (or, for A100, for one to end)


def test_reclaim_never_takes_a_lender_below_its_own_per_model_quota() -> None:
    # Both are guaranteed 2 H100; nlp holds all 4 and the A100s. vision takes back 2 H100 and no
    # more: its third job is beyond its quota, and nlp keeps its own 2.
    projects = [
        Project.create("vision", quota=2, quota_by_model={"H100": 2}),
        Project.create("nlp", quota=2, quota_by_model={"H100": 2}),
    ]
    held = _holding("nlp", "a1", 100) + _holding("nlp", "h1", 200)
    result = _run([pending(i, project="vision", gpu_model="H100") for i in (1, 2, 3)], projects, held)
    stopped = sorted(p.job_id for p in result.preemptions)
    assert len(stopped) == 2 and all(200 <= i < 204 for i in stopped)


def test_a_per_model_quota_guarantees_the_model_a_total_quota_would_not() -> None:
    # With a total quota of 4, nlp's 4 A100 jobs are within its quota: vision (total quota 4) can
    # take nothing back. Give nlp per-model quotas of 4 A100 and its H100 jobs are borrowed.
    held = _holding("nlp", "a1", 100) + _holding("nlp", "h1", 200)
    jobs = [pending(1, project="vision", gpu_model="H100")]
    total = _run(jobs, [Project("vision", quota=4), Project("nlp", quota=4)], held)
    # nlp holds 8 against 4: it borrows 4 by the total rule; the youngest is taken, any model.
    assert len(total.preemptions) == 1
    per_model = [Project("vision", quota=4), Project.create("nlp", quota=4, quota_by_model={"A100": 4})]
    result = _run(jobs, per_model, held)
    assert [p.job_id for p in result.preemptions if p.job_id < 200] == []  # never one of its A100 jobs
    assert len(result.preemptions) == 1


def test_without_per_model_figures_nothing_is_built() -> None:
    plain = snapshot(FLEET, [pending(1, project="vision")], None, [Project("vision", quota=2, limit=4)])
    assert open_session(plain, SchedulerConfig()).per_model is None
    given = snapshot(FLEET, [], None, [Project.create("vision", limit_by_model={"H100": 1})])
    assert open_session(given, SchedulerConfig()).per_model is not None


def test_why_says_which_limit_left_a_model_out() -> None:
    # vision may hold 2 H100 and does; the A100s are nlp's: its job waits, and why says why the
    # free H100s are not for it.
    projects = [Project.create("vision", limit_by_model={"H100": 2}), Project("nlp", quota=4)]
    held = _holding("nlp", "a1", 100) + _holding("vision", "h1", 200, count=2)
    result = _run([pending(1, project="vision")], projects, held)
    assert not result.starts and not result.preemptions
    assert result.pending[1].message.endswith("; only on A100: project vision holds 2 of its 2 H100 (--limit H100=2)")

"""Per-model figures in a tree of projects (issue 34 items 1 and 2), on a mixed fleet of one H100
node and one A100 node: a unit's per-model limit holds back every job below it for that model,
with ``--gpu-model`` or without one (then placed only on models with room), ``why`` naming the
unit; a unit's per-model limit counts its projects' holdings together."""

from __future__ import annotations

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import RunningJob
from gpupool.scheduler import schedule
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import open_session
from gpupool.scheduler.fair_share import fair_shares
from tests.support.builders import node, pending, running, snapshot

FLEET = [node("a1", 4, model="A100"), node("h1", 4, model="H100")]
TREE = [
    Project.create("cs", limit_by_model={"H100": 2}),
    Project("vision", parent="cs"),
    Project("nlp", parent="cs"),
    Project("lab3", parent="vision"),
    Project("bio"),
]


def _run(jobs: list, held: list[RunningJob] | None = None, projects: list[Project] = TREE):  # type: ignore[no-untyped-def,type-arg]
    return schedule(snapshot(FLEET, jobs, held, projects))


def _on(result, job_id: int) -> str:  # type: ignore[no-untyped-def]
    return next(s.placements[0].node for s in result.starts if s.job_id == job_id)


@pytest.mark.parametrize(
    ("project", "gpu_model", "started", "why"),
    [
        # nlp holds 1 H100, vision asks 2: the first starts, the second waits naming the unit.
        ("vision", "H100", [1], "limit: unit cs holds 2 of its 2 H100 (--limit H100=2); this job needs 1 more"),
        # Two levels down: cs's limit holds lab3 back though vision has none.
        ("lab3", "H100", [1], "limit: unit cs holds 2 of its 2 H100 (--limit H100=2); this job needs 1 more"),
        # A project outside cs is not held back by it.
        ("bio", "H100", [1, 2], None),
    ],
)
def test_a_units_per_model_limit_holds_back_every_project_below_it(
    project: str, gpu_model: str, started: list[int], why: str | None
) -> None:
    held = [running(100, ("h1", (0,)), project="nlp")]
    result = _run([pending(i, project=project, gpu_model=gpu_model) for i in (1, 2)], held)
    assert sorted(s.job_id for s in result.starts) == started
    if why is not None:
        assert result.pending[2].code is ReasonCode.LIMIT and result.pending[2].message == why


def test_a_job_without_a_model_goes_to_the_models_its_unit_has_room_for() -> None:
    # cs's projects hold its 2 H100, leaving the H100 node the fullest: placement prefers it
    # (without cs's limit the job lands there), but vision's job with no model starts on an A100.
    held = [running(100, ("h1", (0,)), project="nlp"), running(101, ("h1", (1,)), project="lab3")]
    held.append(running(200, ("a1", (0,)), project="bio"))
    assert _on(_run([pending(1, project="vision")], held, [Project("cs"), *TREE[1:]]), 1) == "h1"
    assert _on(_run([pending(1, project="vision")], held), 1) == "a1"


def test_why_names_the_unit_whose_limit_left_a_model_out() -> None:
    # cs holds its 2 H100 and the A100s are bio's: vision's job with no model waits, and why
    # says the free H100s are held back by the unit.
    held = [running(100, ("h1", (0,)), project="nlp"), running(101, ("h1", (1,)), project="nlp")]
    held += [running(200 + i, ("a1", (i,)), project="bio") for i in range(4)]
    result = _run([pending(1, project="vision")], held)
    assert not result.starts and not result.preemptions
    assert result.pending[1].message.endswith("; only on A100: unit cs holds 2 of its 2 H100 (--limit H100=2)")


def test_a_projects_and_its_units_per_model_limits_are_both_said() -> None:
    tree = [
        Project.create("cs", limit_by_model={"H100": 3}),
        Project.create("vision", parent="cs", limit_by_model={"H100": 1}),
        Project("nlp", parent="cs"),
    ]
    held = [running(100, ("h1", (0,)), project="vision"), running(101, ("h1", (1,)), project="nlp")]
    held.append(running(102, ("h1", (2,)), project="nlp"))
    result = _run([pending(1, project="vision", gpu_model="H100")], held, tree)
    assert result.pending[1].message == (
        "limit: project vision holds 1 of its 1 H100 (--limit H100=1); unit cs holds 3 of its 3 H100"
        " (--limit H100=3); this job needs 1 more"
    )


def test_a_units_per_model_limit_holds_within_one_cycle() -> None:
    # bio holds 2 H100, leaving the H100 node the fullest, which placement fills first; cs may
    # hold 1 H100: of five jobs of three projects below it, none asking a model, one lands there.
    tree = [Project.create("cs", limit_by_model={"H100": 1}), *TREE[1:]]
    held = [running(200, ("h1", (0,)), project="bio"), running(201, ("h1", (1,)), project="bio")]
    jobs = [pending(i, project=p) for i, p in enumerate(("vision", "nlp", "vision", "nlp", "lab3"), 1)]
    on = [s.placements[0].node for s in _run(jobs, held, tree).starts]
    assert len(on) == 5 and on.count("h1") == 1


# cs is guaranteed 2 H100 (and 2 GPUs in all) and borrows the rest of the fleet through vision;
# bio, guaranteed 4, waits for an H100.
QUOTA_TREE = [
    Project.create("cs", quota=2, quota_by_model={"H100": 2}),
    Project("vision", parent="cs"),
    Project("nlp", parent="cs"),
    Project("bio", quota=4),
]
BORROWED = [running(100 + i, ("h1", (i,)), project="vision") for i in range(4)] + [
    running(200 + i, ("a1", (i,)), project="vision") for i in range(4)
]


def test_a_units_per_model_quota_leaves_reclaim_by_totals_working() -> None:
    # Reclaim decides by the tree's totals (cs holds 8 against its quota 2): bio's H100 job takes
    # one H100 back from vision.
    result = _run([pending(1, project="bio", gpu_model="H100")], BORROWED, QUOTA_TREE)
    assert [p.job_id for p in result.preemptions] == [103]
    assert result.pending[1].code is ReasonCode.RECLAIM


def test_keeps_units_keeps_a_units_per_model_quota_against_projects_outside_it() -> None:
    session = open_session(snapshot(FLEET, [], BORROWED, QUOTA_TREE), SchedulerConfig())
    per_model = session.per_model
    assert per_model is not None
    h100, a100 = BORROWED[:4], BORROWED[4:]
    assert per_model.keeps_units("bio", h100[:2])  # cs keeps 2 H100
    assert not per_model.keeps_units("bio", h100[:3])  # it would keep 1 of its 2
    assert per_model.keeps_units("bio", a100)  # it names no A100 quota
    assert per_model.keeps_units("nlp", h100)  # inside cs, the GPUs stay its own


def test_fair_share_reads_the_totals_only() -> None:
    # As the guide says: per-model figures change no fair share, at any level; the total --limit caps it.
    per_model = [
        Project.create("cs", quota=4, quota_by_model={"H100": 4}, limit_by_model={"H100": 4}),
        Project.create("vision", quota=2, parent="cs", quota_by_model={"H100": 2}, limit_by_model={"A100": 2}),
        Project("nlp", quota=2, parent="cs"),
        Project("bio", quota=2, limit=3),
    ]
    totals = [
        Project("cs", quota=4),
        Project("vision", quota=2, parent="cs"),
        Project("nlp", quota=2, parent="cs"),
        Project("bio", quota=2, limit=3),
    ]
    assert fair_shares(per_model, 8) == fair_shares(totals, 8) == {"cs": 5.0, "bio": 3.0, "vision": 2.5, "nlp": 2.5}


def test_reclaim_never_takes_a_unit_below_its_per_model_quota() -> None:
    # bio asks 3 H100: taking 3 of vision's 4 would leave cs 1 of its guaranteed 2 H100, so reclaim
    # takes at most 2 (and bio's job waits for more rather than breaking cs's guarantee).
    result = _run([pending(1, project="bio", gpus=3, gpu_model="H100")], BORROWED, QUOTA_TREE)
    taken = [p.job_id for p in result.preemptions]
    assert len([j for j in taken if 100 <= j < 104]) <= 2, taken
    assert not result.starts

"""Projects: validation, fair-share arithmetic, and how quota and limit shape allocation."""

from __future__ import annotations

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.errors import InvalidInput
from gpupool.domain.projects import Project, effective_projects
from gpupool.scheduler import schedule
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.fair_share import fair_shares
from tests.support.builders import node, pending, running, snapshot


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "bad name"}, "invalid project name"),
        ({"name": "a", "quota": -1}, "quota must be"),
        ({"name": "a", "weight": 0}, "weight must be above 0"),
        ({"name": "a", "quota": 4, "limit": 2}, "below quota"),
        ({"name": "a", "quota": float("nan")}, "quota must be"),
    ],
)
def test_project_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        Project.create(**kwargs)  # type: ignore[arg-type]


def test_fair_share_is_quota_plus_weighted_part_of_the_unquoted_gpus() -> None:
    projects = [Project("a", quota=4), Project("b", quota=2, weight=3), Project("c", quota=0, weight=1, limit=1)]
    shares = fair_shares(projects, capacity=16)
    # 10 GPUs beyond quotas, split 1:3:1 -> 2, 6, 2; c is capped by its limit of 1
    assert shares == {"a": 6.0, "b": 8.0, "c": 1.0}


def test_default_project_is_guaranteed_what_no_other_project_is() -> None:
    assert {p.name: p.quota for p in effective_projects([], 8)} == {"default": 8.0}
    eff = effective_projects([Project("vision", quota=4), Project("nlp", quota=2)], 8)
    assert {p.name: p.quota for p in eff} == {"default": 2.0, "nlp": 2.0, "vision": 4.0}
    assert {p.name: p.quota for p in effective_projects([Project("default", quota=1)], 8)} == {"default": 1.0}


def test_limit_caps_what_a_project_holds_borrowing_included() -> None:
    result = schedule(
        snapshot(
            [node("n1", 8)],
            [pending(i, project="vision") for i in range(1, 5)],
            [running(9, ("n1", (0, 1)), project="vision")],
            [Project("vision", quota=2, limit=4)],
        )
    )
    assert sorted(s.job_id for s in result.starts) == [1, 2]
    for job_id in (3, 4):
        reason = result.pending[job_id]
        assert reason.code is ReasonCode.LIMIT
        assert reason.message == "limit: project vision holds 4 of its limit 4 GPUs; this job needs 1 more"


def test_interactive_runs_only_inside_quota_while_train_may_borrow() -> None:
    projects = [Project("nlp", quota=2)]
    queue = [
        pending(1, gpus=2, priority="interactive", project="nlp"),
        pending(2, gpus=1, priority="interactive", project="nlp"),
        pending(3, gpus=2, priority="train", project="nlp"),
    ]
    result = schedule(snapshot([node("n1", 8)], queue, projects=projects))
    assert sorted(s.job_id for s in result.starts) == [1, 3]
    assert result.pending[2].code is ReasonCode.QUOTA
    assert "holds 2 of its quota 2 GPUs" in result.pending[2].message


def test_projects_furthest_below_their_share_go_first() -> None:
    # 4 free GPUs; a holds its whole share already, b holds nothing: b's jobs start first
    projects = [Project("a", quota=4), Project("b", quota=4)]
    queue = [pending(i, project="a", at=i) for i in range(1, 5)] + [pending(i, project="b", at=i) for i in range(5, 9)]
    held = [running(20 + g, ("n1", (g,)), project="a") for g in range(4)]
    result = schedule(snapshot([node("n1", 8)], queue, held, projects))
    assert sorted(s.job_id for s in result.starts) == [5, 6, 7, 8]


def test_between_equal_projects_starts_alternate() -> None:
    projects = [Project("a", quota=2), Project("b", quota=2)]
    queue = [pending(i, project="a", at=i) for i in range(1, 4)] + [
        pending(i, project="b", at=10 + i) for i in range(4, 7)
    ]
    result = schedule(snapshot([node("n1", 4)], queue, projects=projects))
    started = sorted(s.job_id for s in result.starts)
    assert started == [1, 2, 4, 5]


def test_backfill_keeps_a_projects_limit_for_jobs_allocate_let_through_before() -> None:
    """Two jobs of a project limited to one GPU both pass its limit while they wait behind the
    reserved job (the project holds none yet); backfill starts the first, and the second waits
    with reason limit, not past the project's --limit."""
    fifo = SchedulerConfig(job_order="priority_fifo", user_order="none")
    other = running(10, ("n1", (0, 1, 2, 3)), project="vision", owner="ops", max_runtime_s=3600)
    queue = [pending(1, gpus=4, workers=2, project="vision", owner="ops")]
    queue += [pending(i, gpus=1, project="lab", owner="ann", max_runtime_s=60) for i in (2, 3)]
    projects = [Project.create("vision", quota=8), Project.create("lab", quota=0, limit=1)]
    result = schedule(snapshot([node("n1"), node("n2")], queue, [other], projects), fifo)
    assert [s.job_id for s in result.starts] == [2]
    assert result.pending[3].code is ReasonCode.LIMIT, result.pending[3]

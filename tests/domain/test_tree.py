"""The tree of projects (issue 34): what it refuses, naming the numbers, and fair share level by level."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InvalidInput, NotFound
from gpupool.domain.projects import Project, effective_projects
from gpupool.domain.tree import ancestors, validate
from gpupool.scheduler.fair_share import fair_shares

CS = Project.create("cs", quota=32, limit=40)
TREE = [
    CS,
    Project.create("vision", quota=8, parent="cs"),
    Project.create("nlp", quota=16, weight=3, parent="cs"),
    Project.create("bio", quota=16),
    Project.create("lab3", quota=4, parent="vision"),
]


def test_a_tree_within_its_quotas_passes_and_ancestors_are_nearest_first() -> None:
    for p in TREE:
        validate(p, TREE)
    assert ancestors("lab3", {p.name: p.parent for p in TREE}) == ["vision", "cs"]
    assert ancestors("bio", {p.name: p.parent for p in TREE}) == []


@pytest.mark.parametrize(
    ("changed", "error", "message"),
    [
        (
            Project.create("vision", quota=20, parent="cs"),
            InvalidInput,
            "cs has quota 32; its children's quotas would sum to 36",
        ),
        (
            Project.create("cs", quota=20, limit=40),
            InvalidInput,
            "cs has quota 20; its children's quotas would sum to 24",
        ),
        (Project.create("vision", quota=8, parent="nope"), NotFound, "no project nope to be vision's parent"),
        (Project.create("cs", quota=32, parent="lab3"), InvalidInput, "a cycle (cs under lab3 under vision under cs)"),
        (Project.create("new", quota=9, parent="cs"), InvalidInput, "its children's quotas would sum to 33"),
    ],
)
def test_what_would_break_the_tree_is_refused_naming_the_numbers(
    changed: Project, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as refused:
        validate(changed, TREE)
    assert message in str(refused.value)


def test_a_project_cannot_be_its_own_parent() -> None:
    with pytest.raises(InvalidInput, match="its own parent"):
        Project.create("cs", parent="cs")


def test_fair_share_is_split_level_by_level_by_quota_and_weight() -> None:
    projects = effective_projects(TREE, 64)
    assert next(p for p in projects if p.name == "default").quota == 16  # 64 - cs 32 - bio 16: children count once
    shares = fair_shares(projects, 64)
    assert (shares["cs"], shares["bio"], shares["default"]) == (32, 16, 16)
    # cs's 32: vision 8 + nlp 16 quota, the 8 left by weight 1:3.
    assert (shares["vision"], shares["nlp"]) == (10, 22)
    assert shares["lab3"] == 10  # vision's only child takes all its share


def test_without_parents_the_shares_are_the_flat_lists() -> None:
    flat = [Project.create("a", quota=4, limit=6), Project.create("b", quota=2, weight=2), Project.create("c")]
    shares = fair_shares(flat, 16)
    beyond = 16 - 6
    assert shares == {"a": 6, "b": 2 + beyond * 2 / 4, "c": beyond / 4}
    assert list(shares) == ["a", "b", "c"]

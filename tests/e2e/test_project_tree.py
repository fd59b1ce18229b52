"""The tree of projects through the CLI (issue 34): two units over four projects, shown indented
and nested, with the bad input refused naming the numbers."""

from __future__ import annotations

import json

import pytest

from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e


def _ok(head: HeadProcess, *args: str) -> str:
    out = head.cli(*args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _refused(head: HeadProcess, *args: str) -> str:
    out = head.cli(*args)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out
    return out.stderr


def test_two_units_four_projects_through_the_cli(head: HeadProcess) -> None:
    _ok(head, "project", "set", "cs", "--quota", "4", "--limit", "5")
    _ok(head, "project", "set", "bio", "--quota", "2")
    assert "project vision (under cs)" in _ok(head, "project", "set", "vision", "--quota", "2", "--parent", "cs")
    _ok(head, "project", "set", "nlp", "--quota", "2", "--parent", "cs")
    _ok(head, "project", "set", "genome", "--quota", "1", "--parent", "bio")
    _ok(head, "project", "set", "protein", "--quota", "1", "--parent", "bio", "--everyone")

    assert "cs has quota 4; its children's quotas would sum to 5" in _refused(
        head, "project", "set", "vision", "--quota", "3", "--parent", "cs"
    )
    assert "cs has quota 2; its children's quotas would sum to 4" in _refused(
        head, "project", "set", "cs", "--quota", "2"
    )
    assert "a cycle (cs under nlp under cs)" in _refused(
        head, "project", "set", "cs", "--quota", "4", "--parent", "nlp"
    )
    assert "no project lab to be vision's parent" in _refused(head, "project", "set", "vision", "--parent", "lab")
    assert "jobs go to leaf projects only" in _refused(head, "submit", "--project", "cs", "--", "true")
    assert "unit with 2 child project(s) (nlp, vision)" in _refused(head, "project", "delete", "cs")
    _ok(head, "project", "set", "nlp", "--quota", "1")  # the parent stays as it was

    job = _ok(head, "submit", "--project", "protein", "--gpus", "1", "--", "sleep", "30").split()[-1]
    with head.client() as c:
        wait_state(c, int(job), ("running",))
    tree = json.loads(_ok(head, "projects", "-o", "json"))
    assert [p["name"] for p in tree] == ["bio", "cs", "default"]
    by_name = {p["name"]: p for p in tree}
    assert [c["name"] for c in by_name["cs"]["children"]] == ["nlp", "vision"]
    assert [c["name"] for c in by_name["bio"]["children"]] == ["genome", "protein"]
    protein = by_name["bio"]["children"][1]
    assert protein["parent"] == "bio" and protein["children"] == [] and protein["allocated"] == 1
    assert by_name["bio"]["allocated"] == 1  # a unit holds what its projects hold
    assert by_name["default"]["quota"] == 2  # 8 - cs 4 - bio 2: children's quotas are inside their units'
    assert sum(p["fair_share"] for p in tree) == pytest.approx(8)
    assert set(by_name["cs"]) >= {"quota", "limit", "weight", "allocated", "pending", "fair_share", "borrowed"}

    table = _ok(head, "projects")
    lines = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert "  vision" in table and "  genome" in table and lines["cs"].startswith("cs")

    _ok(head, "project", "set", "protein", "--quota", "1", "--parent", "none")  # detached: a child of the root
    tree = json.loads(_ok(head, "projects", "-o", "json"))
    assert [p["name"] for p in tree] == ["bio", "cs", "default", "protein"]
    head.cli("cancel", job)

"""The tree of projects through the CLI (issue 34): two units over four projects, shown indented
and nested, with the bad input refused naming the numbers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.headproc import HeadProcess, wait_for, wait_state
from tests.support.unix_accounts import TestAccounts

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


def _token(head: HeadProcess, user: str, accounts: TestAccounts) -> str:
    return _ok(head, "user", "add", user, "--unix-user", accounts.make(user)).strip().splitlines()[-1]


def _submit(head: HeadProcess, token: str, project: str) -> int:
    out = head.cli("submit", "--project", project, "--gpus", "1", "--", "sleep", "60", token=token)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def _waiting(head: HeadProcess, job: int, code: str) -> dict[str, Any]:
    """``why`` of ``job`` once the scheduler has given it a reason with ``code``."""

    def reason() -> dict[str, Any] | None:
        why = json.loads(_ok(head, "why", str(job), "-o", "json"))
        return why if why.get("reason_code") == code else None

    return dict(wait_for(reason, what=f"job {job} to wait with {code}"))


def test_three_users_in_a_tree_of_two_units_and_four_projects(
    head_factory: type[HeadProcess], db_url: str, unix_accounts: TestAccounts
) -> None:
    """ann manages unit cs (so nlp and vision below it) and submits to nlp; ben and cat are plain
    members of vision, cat also of genome under bio. On SQLite and on PostgreSQL: a unit's limit
    holds ann's job back naming the unit; vision's per-user limit holds ben's second job while
    cat's starts; the tree shows and nests what each level holds; ann may act on a job below her
    unit, cat on none but her own."""
    head = head_factory(extra=["--db", db_url]).start()  # 2 nodes x 4 simulated GPUs
    _ok(head, "project", "set", "cs", "--quota", "4", "--limit", "5")
    _ok(head, "project", "set", "bio", "--quota", "2")
    _ok(head, "project", "set", "vision", "--quota", "2", "--parent", "cs", "--user-limit", "1")
    _ok(head, "project", "set", "nlp", "--quota", "2", "--parent", "cs")
    _ok(head, "project", "set", "genome", "--quota", "1", "--parent", "bio")
    _ok(head, "project", "set", "protein", "--quota", "1", "--parent", "bio")
    ann, ben, cat = (_token(head, user, unix_accounts) for user in ("ann", "ben", "cat"))
    assert "ann is a manager of project cs" in _ok(head, "project", "add-member", "cs", "ann", "--role", "manager")
    for project, user in (("nlp", "ann"), ("vision", "ben"), ("vision", "cat"), ("genome", "cat")):
        _ok(head, "project", "add-member", project, user)
    refused = head.cli("submit", "--project", "nlp", "--", "true", token=ben)
    assert refused.returncode == 2 and "nlp" in refused.stderr, refused

    # Per-user limit: ben's second job in vision waits with user_limit; cat's in vision starts.
    bens = [_submit(head, ben, "vision") for _ in range(2)]
    cats = _submit(head, cat, "vision")
    with head.client() as c:
        wait_state(c, bens[0], ("running",))
        wait_state(c, cats, ("running",))
        why = _waiting(head, bens[1], "user_limit")
        assert "ben holds 1 of their 1 GPUs in project vision (--user-limit)" in why["reason"], why

        # The unit's limit: cs holds 2 (vision) + 3 (nlp) = 5 of 5; ann's fourth nlp job waits naming cs.
        anns = [_submit(head, ann, "nlp") for _ in range(4)]
        for job in anns[:3]:
            wait_state(c, job, ("running",))
        why = _waiting(head, anns[3], "limit")
        assert (
            "limit: unit cs is at its limit of 5 GPUs (its projects hold 5; project nlp's job needs 1 more)"
            in (why["reason"])
        ), why
        assert "unit cs" in _ok(head, "why", str(anns[3]))
        genome = _submit(head, cat, "genome")  # bio has no limit: it starts beside the full cs
        wait_state(c, genome, ("running",))

    tree = {p["name"]: p for p in json.loads(_ok(head, "projects", "-o", "json"))}
    assert set(tree) == {"bio", "cs", "default"}
    cs, bio = tree["cs"], tree["bio"]
    assert {k["name"]: (k["allocated"], k["parent"]) for k in cs["children"]} == {
        "nlp": (3, "cs"),
        "vision": (2, "cs"),
    }
    assert cs["allocated"] == 5 and cs["pending"] == 2 and bio["allocated"] == 1
    assert [k["name"] for k in bio["children"]] == ["genome", "protein"]
    lines = {line.split()[0]: line for line in _ok(head, "projects").splitlines() if line.strip()}
    assert lines["cs"].startswith("cs") and "  nlp" in _ok(head, "projects")

    # Managing below a unit: cat (a plain member) may not cancel ben's job; ann, manager of cs, may.
    refused = head.cli("cancel", str(bens[0]), token=cat)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused
    assert head.cli("cancel", str(bens[0]), token=ann).returncode == 0
    with head.client() as c:
        assert wait_state(c, bens[0], ("cancelled",))["state"] == "cancelled"
    for job in [*bens[1:], cats, *anns, genome]:
        head.cli("cancel", str(job))

"""Projects through the CLI and API: set, list with usage, delete, and limits that hold."""

from __future__ import annotations

import json

import pytest

from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e

PROJECT_FIELDS = {"name", "quota", "limit", "weight", "allocated", "pending", "fair_share", "borrowed"}


def test_projects_set_list_usage_and_delete(head: HeadProcess) -> None:
    out = head.cli("project", "set", "vision", "--quota", "4", "--limit", "6")
    assert out.returncode == 0, out.stderr
    assert "fair share now" in out.stdout
    assert head.cli("project", "set", "nlp", "--quota", "2", "--weight", "2").returncode == 0
    ids = [head.cli("submit", "--project", "vision", "--", "sleep", "30").stdout.split()[-1] for _ in range(7)]
    with head.client() as c:
        for job_id in ids[:6]:
            wait_state(c, int(job_id), ("running",))
        blocked = wait_state(c, int(ids[6]), ("pending",))
        assert wait_state(c, int(ids[6]), ("pending",))["state"] == "pending"
    listing = json.loads(head.cli("projects", "-o", "json").stdout)
    by_name = {p["name"]: p for p in listing}
    assert set(by_name) == {"default", "nlp", "vision"}
    assert all(set(p) >= PROJECT_FIELDS for p in listing)
    vision = by_name["vision"]
    assert (vision["quota"], vision["limit"], vision["allocated"], vision["borrowed"], vision["pending"]) == (
        4.0,
        6.0,
        6.0,
        2.0,
        1.0,
    )
    assert by_name["default"]["quota"] == 2.0  # what no other project is guaranteed: 8 - 4 - 2
    assert sum(p["fair_share"] for p in listing) == pytest.approx(8.0)
    why = json.loads(head.cli("why", ids[6], "-o", "json").stdout)
    assert why["reason_code"] == "limit" and "holds 6 of its limit 6 GPUs" in why["reason"], (why, blocked)
    refused = head.cli("project", "delete", "vision")
    assert refused.returncode == 2 and "still has 7 pending or running" in refused.stderr
    table = head.cli("projects").stdout
    assert "vision" in table and "SHARE" in table and "BORROWED" in table
    for job_id in ids:
        head.cli("cancel", job_id)
    with head.client() as c:
        for job_id in ids:
            wait_state(c, int(job_id), ("cancelled",))
    assert head.cli("project", "delete", "vision").returncode == 0
    assert "vision" not in {p["name"] for p in json.loads(head.cli("projects", "-o", "json").stdout)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["project", "set", "x", "--quota", "3", "--limit", "2"], "below quota"),
        (["project", "set", "bad name", "--quota", "1"], "invalid project name"),
        (["project", "set", "x", "--weight", "0"], "weight must be above 0"),
        (["project", "delete", "nope"], "no project nope"),
        (
            ["project", "set", "x", "--limit", "6", "--user-limit", "8"],
            "a user limit of 8 is above project x's limit of 6",
        ),
        (["project", "set", "x", "--limit", "6", "--user-limit", "ann=7"], "ann's user limit of 7 is above"),
        (["project", "set", "x", "--user-limit", "lots"], "--user-limit 'lots': give GPUs (4)"),
        (["project", "set", "x", "--user-limit", "2", "--user-limit", "3"], "is given twice"),
    ],
)
def test_project_bad_input(shared_head: HeadProcess, args: list[str], message: str) -> None:
    result = shared_head.cli(*args)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error:") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_user_limit_holds_a_users_jobs_and_shows_in_the_listing(head: HeadProcess) -> None:
    """The head's own user (admin) at their limit in a project: the third job waits with
    ``user_limit``; the listing shows the limits in JSON and under the table."""
    out = head.cli("project", "set", "vision", "--quota", "4", "--user-limit", "1", "--user-limit", "admin=2")
    assert out.returncode == 0, out.stderr
    assert "user limit 1, admin=2" in out.stdout
    ids = [head.cli("submit", "--project", "vision", "--", "sleep", "30").stdout.split()[-1] for _ in range(3)]
    with head.client() as c:
        for job_id in ids[:2]:
            wait_state(c, int(job_id), ("running",))
        wait_state(c, int(ids[2]), ("pending",))
    why = json.loads(head.cli("why", ids[2], "-o", "json").stdout)
    assert why["reason_code"] == "user_limit", why
    assert "admin holds 2 of their 2 GPUs in project vision (--user-limit admin=2)" in why["reason"], why
    vision = {p["name"]: p for p in json.loads(head.cli("projects", "-o", "json").stdout)}["vision"]
    assert (vision["user_limit"], vision["user_limits"]) == (1.0, {"admin": 2.0})
    assert "project vision: user limit 1, admin=2" in head.cli("projects").stdout
    for job_id in ids:
        head.cli("cancel", job_id)
    assert head.cli("project", "set", "vision", "--quota", "4").returncode == 0  # every setting replaced
    vision = {p["name"]: p for p in json.loads(head.cli("projects", "-o", "json").stdout)}["vision"]
    assert (vision["user_limit"], vision["user_limits"]) == (None, {})

"""A lab shares a real head through the CLI: an admin, two members of two projects and a viewer.
Each person submits where they belong, sees the whole queue but only their own jobs' insides,
controls only what is theirs; the viewer only looks; the admin sees who did what."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.headproc import HeadProcess, wait_for
from tests.support.unix_accounts import TestAccounts

pytestmark = pytest.mark.e2e


def _ok(head: HeadProcess, *args: str, token: str | None = None) -> str:
    out = head.cli(*args, token=token)
    assert out.returncode == 0, (args, out.stderr)
    return out.stdout


def _json(head: HeadProcess, *args: str, token: str | None = None) -> Any:
    return json.loads(_ok(head, *args, "-o", "json", token=token))


def _refused(head: HeadProcess, *args: str, token: str | None, says: str) -> None:
    out = head.cli(*args, token=token)
    assert out.returncode == 2, (args, out)
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)


def test_an_admin_two_members_and_a_viewer(head: HeadProcess, unix_accounts: TestAccounts) -> None:
    _ok(head, "project", "set", "lab", "--quota", "4")
    _ok(head, "project", "set", "nlp", "--quota", "4")
    tokens = {
        name: _ok(head, "user", "add", name, "--role", role, "--unix-user", unix_accounts.make(name))
        .strip()
        .splitlines()[-1]
        for name, role in [("ann", "member"), ("ben", "member"), ("val", "viewer")]
    }
    ann, ben, val = tokens["ann"], tokens["ben"], tokens["val"]
    _ok(head, "project", "add-member", "lab", "ann")
    _ok(head, "project", "add-member", "nlp", "ben")
    assert {u["name"]: u["projects"] for u in _json(head, "user", "list")} == {
        "admin": [],
        "ann": ["lab"],
        "ben": ["nlp"],
        "val": [],
    }

    # Each submits where they belong, and nowhere else.
    ann_job = int(_ok(head, "submit", "--project", "lab", "--gpus", "1", "--", "sleep", "60", token=ann).split()[-1])
    ben_job = int(_ok(head, "submit", "--project", "nlp", "--gpus", "1", "--", "sleep", "60", token=ben).split()[-1])
    _refused(head, "submit", "--project", "nlp", "--", "true", token=ann, says="ann may not submit to project nlp")
    _refused(head, "submit", "--project", "robotics", "--", "true", token=ann, says="no project robotics")
    _refused(head, "submit", "--", "true", token=val, says="a viewer may only look")

    # The queue is public; what runs inside a job is its owner's.
    listed = {j["id"]: j for j in _json(head, "jobs", token=ann)}
    assert {(j["owner"], j["project"]) for j in listed.values()} == {("ann", "lab"), ("ben", "nlp")}
    assert listed[ann_job]["command"] == ["sleep", "60"] and listed[ben_job]["command"] is None
    assert [j["id"] for j in _json(head, "jobs", "--mine", token=ben)] == [ben_job]
    assert [j["id"] for j in _json(head, "jobs", "--user", "ann", token=val)] == [ann_job]
    assert "hidden" in _ok(head, "show", str(ben_job), token=ann)
    _refused(head, "cancel", str(ben_job), token=ann, says="it is ben's")
    _refused(head, "logs", str(ben_job), token=ann, says="it is ben's")

    # The viewer looks at everything a wall dashboard needs, and changes nothing.
    assert len(_json(head, "nodes", token=val)) == 2
    assert {p["name"] for p in _json(head, "projects", token=val)} >= {"lab", "nlp"}
    _refused(head, "cancel", str(ann_job), token=val, says="val may not")
    _refused(head, "drain", "node-1", token=val, says="an admin")
    _refused(head, "drain", "node-1", token=ben, says="an admin")
    _refused(head, "audit", token=ann, says="an admin")

    # Owners control their own jobs; the admin sees who did what.
    _ok(head, "cancel", str(ann_job), token=ann)
    _ok(head, "cancel", str(ben_job))  # an admin cancels anyone's
    with head.client() as c:
        wait_for(lambda: all(c.job(j)["state"] == "cancelled" for j in (ann_job, ben_job)), what="both cancelled")
    by_user = {g["key"]: g for g in _json(head, "report", "--by", "user", "--since", "1h")["groups"]}
    assert {"ann", "ben"} <= set(by_user)
    audit = _json(head, "audit", "--since", "1h")
    seen = {(a["user"], a["action"], a["result"]) for a in audit}
    assert ("ann", "jobs.submit", "ok") in seen and ("ann", "jobs.cancel", "denied") in seen, seen
    assert ("admin", "jobs.cancel", "ok") in seen and ("val", "nodes.drain", "denied") in seen, seen
    assert [a["user"] for a in _json(head, "audit", "--user", "val")] and all(
        a["user"] == "val" for a in _json(head, "audit", "--user", "val")
    )

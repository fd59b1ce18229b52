"""Capacity never lent through the CLI (issue 34 item 3): --lend-limit set, shown, refused above
the quota naming the numbers, and a borrower's job held back naming the lender."""

from __future__ import annotations

import json

import pytest

from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e


def _ok(head: HeadProcess, *args: str) -> str:
    out = head.cli(*args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_lend_limit_through_the_cli(head: HeadProcess) -> None:
    out = head.cli("project", "set", "vision", "--quota", "4", "--lend-limit", "5")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out
    assert "lend limit 5 is above quota 4" in out.stderr
    assert "lends at most 1 of it" in _ok(head, "project", "set", "vision", "--quota", "4", "--lend-limit", "1")
    _ok(head, "project", "set", "nlp", "--quota", "4", "--everyone")
    listing = {p["name"]: p for p in json.loads(_ok(head, "projects", "-o", "json"))}
    assert listing["vision"]["lend_limit"] == 1 and listing["nlp"]["lend_limit"] is None
    assert "4 (lend 1)" in _ok(head, "projects")

    # 8 GPUs, vision's 4 idle: nlp may borrow 1 of them; its second borrowing job waits.
    with head.client() as c:
        jobs = [_ok(head, "submit", "--project", "nlp", "--", "sleep", "60").split()[-1] for _ in range(6)]
        for job in jobs[:5]:
            wait_state(c, int(job), ("running",))
        why = _ok(head, "why", jobs[5])
    assert "3 idle GPUs are kept for project vision (--lend-limit 1)" in why
    for job in jobs:
        head.cli("cancel", job)

"""Quotas and limits per GPU model through the CLI (issue 34 item 2), on a mixed fleet of an
A100 node and a T4 node: set, listed, honoured, and refused naming the numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e


def ok(result) -> str:  # type: ignore[no-untyped-def]
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def test_per_model_quotas_and_limits_set_listed_and_honoured(head_factory: type[HeadProcess], tmp_path: Path) -> None:
    spec = tmp_path / "hw.json"
    nodes = [{"name": "a100-1", "gpus": [{"model": "A100"}] * 4}, {"name": "t4-1", "gpus": [{"model": "T4"}] * 2}]
    spec.write_text(json.dumps({"nodes": nodes}))
    head = head_factory(extra=["--fake-hardware", str(spec)]).start()
    said = ok(head.cli("project", "set", "vision", "--quota", "A100=1,T4=1", "--limit", "A100=1"))
    assert "quota 2" in said and "per model quota A100=1,T4=1, limit A100=1" in said
    listing = {p["name"]: p for p in json.loads(ok(head.cli("projects", "-o", "json")))}
    vision = listing["vision"]
    assert (vision["quota"], vision["quota_by_model"], vision["limit_by_model"]) == (
        2.0,
        {"A100": 1.0, "T4": 1.0},
        {"A100": 1.0},
    )
    assert listing["default"]["quota_by_model"] == {}  # a project with none lists as before
    assert "2 (A100=1,T4=1)" in ok(head.cli("projects"))
    ok(head.cli("project", "add-member", "vision", "admin"))
    jobs = [
        ok(head.cli("submit", "--project", "vision", "--gpu-model", "A100", "--", "sleep", "30")).split()[-1]
        for _ in range(2)
    ]
    with head.client() as c:
        wait_state(c, int(jobs[0]), ("running",))
        wait_state(c, int(jobs[1]), ("pending",))
    why = json.loads(ok(head.cli("why", jobs[1], "-o", "json")))
    assert why["reason_code"] == "limit"
    assert "project vision holds 1 of its 1 A100 (--limit A100=1)" in why["reason"]
    # Bad input: one line, exit 2, naming the numbers.
    for args, message in [
        (["--quota", "H100=4"], "no node has a GPU of model H100; models here: A100, T4"),
        (["--quota", "2,A100=4"], "quota 2 is below its per-model quotas' sum 4 (A100 4)"),
        (["--quota", "A100=x"], "'x' is not a number of GPUs"),
    ]:
        refused = head.cli("project", "set", "nlp", *args)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    ok(head.cli("project", "set", "cs", "--quota", "4,A100=2"))
    refused = head.cli("project", "set", "lab", "--quota", "A100=3", "--parent", "cs")
    assert (
        refused.returncode == 2 and "cs has quota A100=2; its children's A100 quotas would sum to 3" in refused.stderr
    )
    for job_id in jobs:
        head.cli("cancel", job_id)

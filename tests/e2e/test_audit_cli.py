"""`gpupool audit` on a real head: what users changed, and failed sign-ins, as JSON and as a table;
admins only; and what was recorded just before a clean stop is there after a restart."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.headproc import HeadProcess

pytestmark = pytest.mark.e2e


def test_audit_command_lists_changes_and_failed_sign_ins(head: HeadProcess) -> None:
    added = head.cli("user", "add", "alice")
    assert added.returncode == 0, added.stderr
    alice = added.stdout.strip().splitlines()[-1]
    job = head.cli("submit", "--gpus", "0", "--", "sleep", "30").stdout.split()[-1]
    assert head.cli("cancel", job).returncode == 0
    assert head.cli("drain", "node-1", token=alice).returncode == 2  # refused: recorded as denied
    assert head.cli("jobs", token="gp_wrong").returncode == 2  # a failed sign-in
    assert head.cli("jobs").returncode == 0  # a read: not recorded

    out = head.cli("audit", "-o", "json")
    assert out.returncode == 0, out.stderr
    entries = json.loads(out.stdout)
    assert [(e["user"], e["action"], e["target"], e["result"]) for e in reversed(entries)] == [
        ("admin", "users.add", "user alice", "ok"),
        ("admin", "jobs.submit", f"job {job}", "ok"),
        ("admin", "jobs.cancel", f"job {job}", "ok"),
        ("alice", "nodes.drain", "node node-1", "denied"),
        (None, "auth.failed", "GET /api/v1/jobs", "denied"),
    ]
    assert {e["client"] for e in entries} == {"127.0.0.1"}
    assert "gp_wrong" not in out.stdout and alice not in out.stdout

    mine = json.loads(head.cli("audit", "--user", "alice", "--since", "1d", "-o", "json").stdout)
    assert [e["action"] for e in mine] == ["nodes.drain"]
    assert len(json.loads(head.cli("audit", "--limit", "2", "-o", "json").stdout)) == 2
    table = head.cli("audit", "--user", "admin")
    assert table.returncode == 0 and "jobs.submit" in table.stdout and f"job {job}" in table.stdout, table
    refused = head.cli("audit", token=alice)
    assert refused.returncode == 2 and "may not" in refused.stderr, refused
    bad = head.cli("audit", "--since", "yesterday")
    assert bad.returncode == 2 and "malformed time" in bad.stderr, bad


def test_entries_recorded_just_before_a_clean_stop_are_kept(head: HeadProcess) -> None:
    assert head.cli("drain", "node-2").returncode == 0
    code, _ = head.stop()  # at once: likely before the writer's next batch
    assert code == 0
    head.start()
    entries = json.loads(head.cli("audit", "-o", "json").stdout)
    assert [(e["action"], e["target"]) for e in entries] == [("nodes.drain", "node node-2")]


def test_a_forged_forwarded_for_is_not_believed_unless_from_a_trusted_proxy(head_factory: type[HeadProcess]) -> None:
    """Jobs run on the head's machine: an X-Forwarded-For from 127.0.0.1 is not a proxy's word."""
    head = head_factory().start()
    forged = {"Authorization": f"Bearer {head.token()}", "X-Forwarded-For": "6.6.6.6"}
    assert httpx.put(f"{head.url}/api/v1/projects/p1", json={"quota": 1}, headers=forged).status_code == 200
    (entry,) = json.loads(head.cli("audit", "-o", "json").stdout)
    assert entry["client"] == "127.0.0.1"
    head.kill_everything()
    proxied = head_factory(head.data_dir.parent / "proxied", extra=["--trusted-proxy", "127.0.0.1"]).start()
    forged["Authorization"] = f"Bearer {proxied.token()}"
    assert httpx.put(f"{proxied.url}/api/v1/projects/p1", json={"quota": 1}, headers=forged).status_code == 200
    (entry,) = json.loads(proxied.cli("audit", "-o", "json").stdout)
    assert entry["client"] == "6.6.6.6"
    bad = proxied.cli("up", "--trusted-proxy", "everyone")
    assert bad.returncode == 2 and "--trusted-proxy must be an IP address or network" in bad.stderr, bad


def test_an_acknowledged_change_is_in_the_log_after_a_kill_9(head: HeadProcess) -> None:
    with head.client() as c:
        job = c.submit(command=["sleep", "60"], gpus=0)["id"]
    head.stop(sig=9)  # the moment after the answer: no batch, no shutdown
    head.start()
    entries = json.loads(head.cli("audit", "-o", "json").stdout)
    assert ("jobs.submit", f"job {job}") in [(e["action"], e["target"]) for e in entries]
    assert head.cli("cancel", str(job)).returncode == 0


def test_the_audit_table_prints_what_anyone_sent_escaped(head: HeadProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # one line an entry
    assert httpx.post(f"{head.url}/api/v1/%1b[2K%1b[1G[red]forged[/red]").status_code == 401
    table = head.cli("audit")
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout and "\\x1b[2K" in table.stdout and "[red]forged[/red]" in table.stdout, (
        table.stdout
    )

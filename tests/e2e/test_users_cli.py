"""Users and tokens through the CLI on a real head: the bootstrap token belongs to the user
admin, a new user's token is printed once and works, and refusals are one line with exit code 2."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.headproc import HeadProcess
from tests.support.unix_accounts import TestAccounts

pytestmark = pytest.mark.e2e


def test_user_and_token_commands(head: HeadProcess, unix_accounts: TestAccounts) -> None:
    account = unix_accounts.make("alice")
    added = head.cli("user", "add", "alice", "--unix-user", account)
    assert added.returncode == 0, added.stderr
    alice = added.stdout.strip().splitlines()[-1]
    assert alice.startswith("gp_")
    users = json.loads(head.cli("user", "list", "-o", "json").stdout)
    assert [(u["name"], u["role"], u["unix_user"], u["projects"], u["disabled"]) for u in users] == [
        ("admin", "admin", None, [], False),
        ("alice", "member", account, [], False),
    ]
    assert set(users[0]) == {"name", "role", "unix_user", "projects", "created_at", "disabled"}
    made = head.cli("token", "create", "--name", "ci", "--expires", "90d", "-o", "json", token=alice)
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)
    assert (token["user"], token["name"], token["scope"]) == ("alice", "ci", "submit")
    listed = json.loads(head.cli("token", "list", "-o", "json", token=alice).stdout)
    assert [t["name"] for t in listed] == ["first", "ci"]
    assert set(listed[0]) == {"id", "name", "user", "scope", "created_at", "expires_at", "last_used_at"}
    assert "ci" in head.cli("token", "list", "--user", "alice").stdout

    for args, message in [
        (("user", "add", "alice"), "already exists"),
        (("user", "disable", "admin"), "last admin"),
        (("user", "delete", "nobody"), "no user nobody"),
        (("token", "create", "--expires", "10y"), "malformed duration"),
    ]:
        out = head.cli(*args)
        assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out
    refused = head.cli("token", "create", "--user", "admin", token=alice)
    assert refused.returncode == 2 and "only an admin" in refused.stderr

    assert head.cli("token", "revoke", str(token["id"])).returncode == 0
    assert head.cli("user", "disable", "alice").returncode == 0
    time.sleep(1.05)
    out = head.cli("jobs", token=alice)
    assert out.returncode == 2 and out.stderr.startswith("error: invalid token"), out


def test_a_name_given_again_starts_with_nothing_of_the_deleted_users(
    head: HeadProcess, unix_accounts: TestAccounts
) -> None:
    """A deleted user's finished jobs, logs, idle services and submission keys are not inherited
    by a new user of the same name (they were: the new one could read the old one's logs)."""
    import httpx

    from gpupool.client import GpupoolClient
    from tests.support.headproc import wait_state

    account = unix_accounts.make("reuse")
    first = head.cli("user", "add", "reuse", "--unix-user", account).stdout.strip().splitlines()[-1]
    with GpupoolClient(head.url, first) as c:
        job = int(c.submit(command=["sh", "-c", "echo old-secret"], gpus=0)["id"])
        wait_state(c, job, ("succeeded",), timeout=30)
    keyed = {"Authorization": f"Bearer {first}", "Idempotency-Key": "same-key"}
    kept = httpx.post(f"{head.url}/api/v1/jobs", json={"command": ["true"], "gpus": 0}, headers=keyed).json()["id"]
    with head.client() as c:
        wait_state(c, kept, ("succeeded",), timeout=30)
    assert head.cli("user", "delete", "reuse").returncode == 0
    again = head.cli("user", "add", "reuse", "--unix-user", account)
    second = again.stdout.strip().splitlines()[-1]
    mine = json.loads(head.cli("jobs", "--all", "--mine", "-o", "json", token=second).stdout)
    assert mine == []
    logs = head.cli("logs", str(job), token=second)
    assert logs.returncode == 2 and "old-secret" not in logs.stdout, logs
    keyed["Authorization"] = f"Bearer {second}"
    made = httpx.post(f"{head.url}/api/v1/jobs", json={"command": ["true"], "gpus": 0}, headers=keyed)
    assert made.status_code == 201 and made.json()["id"] != kept  # a key of their own, not the old one's
    with head.client() as c:
        owner = c.job(job)["owner"]
    assert owner.startswith("reuse~") and len(owner) <= 64  # an admin still sees whose it was

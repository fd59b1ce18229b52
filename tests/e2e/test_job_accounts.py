"""Jobs run as their owners (issue 14, part 1), on a real head with Unix accounts the test makes:
each job has its owner's uid, groups, HOME and USER; it cannot read another user's run directory
or log, the database or any token; a user with no account is refused at submit until an admin
maps them to one; the built-in admin's jobs run as the head's own user."""

from __future__ import annotations

import grp
import json
import os
import pwd
import time
from typing import Any

import httpx
import pytest

from gpupool.client.http import GpupoolClient
from tests.support.headproc import HeadProcess, wait_for, wait_state
from tests.support.unix_accounts import SHARED_GROUP, TestAccounts

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="jobs run as their owners only where gpupool runs as root; this is not root"
    ),
]

# What a job finds out about itself, and which of the head's files it can open.
PROBE = r"""
echo "ID uid=$(id -u);gid=$(id -g);groups=$(id -G);home=$HOME;user=$USER;cwd=$(pwd)"
for f in "$@"; do
    if cat "$f" >/dev/null 2>&1 || ls "$f" >/dev/null 2>&1; then echo "OPENED $f"; else echo "REFUSED $f"; fi
done
"""


def _ok(head: HeadProcess, *args: str, token: str | None = None) -> str:
    out = head.cli(*args, token=token)
    assert out.returncode == 0, (args, out.stderr)
    return out.stdout


def _submit(head: HeadProcess, token: str, *command: str) -> int:
    return int(_ok(head, "submit", "--gpus", "0", "--", *command, token=token).split()[-1])


def _log(head: HeadProcess, job_id: int) -> str:
    with head.client() as c:
        return c.logs(job_id, worker=0).data.decode()


def _finished(head: HeadProcess, job_id: int) -> dict[str, Any]:
    with head.client() as c:
        return wait_state(c, job_id, ("succeeded", "failed"), timeout=30)


def test_each_job_runs_as_its_owner_and_reaches_nothing_of_the_head_or_other_users(
    head: HeadProcess, unix_accounts: TestAccounts
) -> None:
    ann_account, ben_account = unix_accounts.make("ann"), unix_accounts.make("ben")
    ann = _ok(head, "user", "add", "ann", "--unix-user", ann_account).strip().splitlines()[-1]
    ben = _ok(head, "user", "add", "ben", "--unix-user", ben_account).strip().splitlines()[-1]

    # ben's job runs, with a run directory and a log on the node.
    bens = _submit(head, ben, "sh", "-c", "echo ben-secret-output; sleep 60")
    with head.client() as c:
        running = wait_state(c, bens, ("running",), timeout=30)
    node = head.data_dir / "nodes" / running["placements"][0]["node"]
    ben_run = node / "runs" / f"job-{bens}" / "attempt-1" / "worker-0"
    ben_log = node / "logs" / f"job-{bens}" / "worker-0.log"
    wait_for(lambda: b"ben-secret-output" in ben_log.read_bytes(), timeout=10)
    targets = [
        head.data_dir / "admin-token",
        head.data_dir / "join-token",
        head.data_dir / "gpupool.db",
        head.data_dir,
        ben_run / "spec.json",
        ben_run,
        ben_log,
    ]

    anns = _submit(head, ann, "sh", "-c", PROBE, "probe", *map(str, targets))
    job = _finished(head, anns)
    log = _log(head, anns)
    assert job["state"] == "succeeded", log
    assert job["run_as"] == ann_account and job["owner"] == "ann"

    account = pwd.getpwnam(ann_account)
    groups = sorted(os.getgrouplist(ann_account, account.pw_gid))
    assert grp.getgrnam(SHARED_GROUP).gr_gid in groups  # a supplementary group, not only the primary one
    (identity,) = [line for line in log.splitlines() if line.startswith("ID ")]
    fields = dict(part.split("=", 1) for part in identity.removeprefix("ID ").split(";"))
    assert fields["uid"] == str(account.pw_uid) and fields["gid"] == str(account.pw_gid), identity
    assert sorted(map(int, fields["groups"].split())) == groups, identity
    assert (fields["home"], fields["user"]) == (account.pw_dir, ann_account), identity
    assert fields["cwd"] == os.getcwd(), identity  # the CLI sends where it was run from, as sbatch does
    for target in targets:
        assert f"REFUSED {target}" in log, (target, log)
    assert "OPENED" not in log, log

    # ann reads her own log through the head, and nobody else's.
    assert "ID uid=" in _ok(head, "logs", str(anns), token=ann)
    refused = head.cli("logs", str(bens), token=ann)
    assert refused.returncode == 2 and "ben-secret-output" not in refused.stdout, refused
    _ok(head, "cancel", str(bens), token=ben)


def test_a_user_without_an_account_is_refused_until_mapped_and_the_admin_runs_as_the_head(
    head: HeadProcess, unix_accounts: TestAccounts
) -> None:
    cat = _ok(head, "user", "add", "cat-no-account").strip().splitlines()[-1]
    refused = head.cli("submit", "--gpus", "0", "--", "true", token=cat)
    assert refused.returncode == 2, refused
    assert "the Unix account 'cat-no-account', which does not exist on this machine" in refused.stderr
    assert "gpupool user set-unix-user cat-no-account ACCOUNT" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    with head.client() as c:
        assert [j["id"] for j in c.jobs(include_finished=True)] == []  # nothing half-written

    # An admin cannot map anyone to an account that does not exist, and can map to one that does.
    wrong = head.cli("user", "set-unix-user", "cat-no-account", "no-such-account-xyz")
    assert wrong.returncode == 2 and "'no-such-account-xyz', which does not exist" in wrong.stderr, wrong
    wrong_add = head.cli("user", "add", "dan", "--unix-user", "no-such-account-xyz")
    assert wrong_add.returncode == 2 and "does not exist" in wrong_add.stderr, wrong_add
    account = unix_accounts.make("cat")
    assert f"now run as the Unix account {account}" in _ok(head, "user", "set-unix-user", "cat-no-account", account)
    time.sleep(1.05)  # the head keeps a token's user for up to 1 s
    with GpupoolClient(head.url, cat) as c:  # no working directory: not the head's, their home or /
        job = _finished(head, int(c.submit(command=["sh", "-c", "id -un; pwd"], gpus=0)["id"]))
    assert job["state"] == "succeeded" and job["run_as"] == account
    assert f"\n{account}\n/\n" in _log(head, job["id"])
    users = {u["name"]: u for u in json.loads(_ok(head, "user", "list", "-o", "json"))}
    assert users["cat-no-account"]["unix_user"] == account

    # The built-in admin's jobs run as the head's own user (root here).
    mine = _finished(head, _submit(head, head.token(), "sh", "-c", "id -un"))
    assert mine["state"] == "succeeded" and mine["run_as"] == pwd.getpwuid(os.geteuid()).pw_name
    assert f"\n{mine['run_as']}\n" in _log(head, mine["id"])


def test_nodes_and_the_ready_line_say_jobs_run_as_their_owners_and_the_admins_as_root(head: HeadProcess) -> None:
    listing = json.loads(_ok(head, "nodes", "-o", "json"))
    assert {n["isolation"]["users"] for n in listing} == {
        "setuid (each job runs as its owner's Unix account; the built-in admin's as root)"
    }
    wait_for(lambda: "the built-in admin's (this head's admin token) as root" in "".join(head.output), 10)


def _refused(out: Any, *needles: str) -> None:
    assert out.returncode == 2, out
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    for needle in needles:
        assert needle in out.stderr, (needle, out.stderr)


def test_no_user_runs_jobs_as_root_or_a_system_account_unless_the_head_allows_it(
    head_factory: type[HeadProcess], unix_accounts: TestAccounts
) -> None:
    """Mapping a user onto root or daemon, or adding a user whose own name is a system account, is
    refused with a 4xx naming --allow-system-accounts; nothing is written. A head started with it
    lets them, and the node runs the job as that account."""
    head = head_factory().start()
    _refused(head.cli("user", "add", "eve", "--unix-user", "root"), "is root (uid 0)", "--allow-system-accounts")
    _refused(head.cli("user", "add", "eve", "--unix-user", "daemon"), "is a system account (uid 1", "UID_MIN")
    _refused(head.cli("user", "add", "daemon"), "'daemon', which is a system account")  # the account of the same name
    ok = _ok(head, "user", "add", "eve", "--unix-user", unix_accounts.make("eve"))
    assert "eve added" in ok
    _refused(head.cli("user", "set-unix-user", "eve", "root"), "root (uid 0)", "gpupool user set-unix-user eve ACCOUNT")
    users = {u["name"]: u for u in json.loads(_ok(head, "user", "list", "-o", "json"))}
    assert set(users) == {"admin", "eve"} and users["eve"]["unix_user"] == unix_accounts.make("eve")
    admin = {"Authorization": f"Bearer {head.token()}"}  # the same through the API: a 4xx with a code
    refused = httpx.post(f"{head.url}/api/v1/users", json={"name": "fay", "unix_user": "daemon"}, headers=admin)
    assert refused.status_code == 400 and refused.json()["code"] == "system_account", refused.text
    head.kill_everything()

    lenient = head_factory(head.data_dir.parent / "lenient", extra=["--allow-system-accounts"]).start()
    token = _ok(lenient, "user", "add", "dee", "--unix-user", "daemon").strip().splitlines()[-1]
    job = _finished(lenient, _submit(lenient, token, "sh", "-c", "id -un"))
    assert job["state"] == "succeeded" and job["run_as"] == "daemon"
    assert "\ndaemon\n" in _log(lenient, job["id"])


def test_two_users_on_one_account_only_with_shared_account(head: HeadProcess, unix_accounts: TestAccounts) -> None:
    account = unix_accounts.make("team")
    _ok(head, "user", "add", "gus", "--unix-user", account)
    _refused(
        head.cli("user", "add", "hal", "--unix-user", account), f"'{account}' is already gus's", "--shared-account"
    )
    _ok(head, "user", "add", "hal", "--unix-user", account, "--shared-account")
    _ok(head, "user", "add", "ida", "--unix-user", unix_accounts.make("ida"))
    refused = head.cli("user", "set-unix-user", "ida", account)
    _refused(refused, "already gus, hal's", "--shared-account")
    assert "409" not in refused.stderr  # said in words, not as a status code
    _ok(head, "user", "set-unix-user", "ida", account, "--shared-account")
    users = {u["name"]: u["unix_user"] for u in json.loads(_ok(head, "user", "list", "-o", "json"))}
    assert users["gus"] == users["hal"] == users["ida"] == account

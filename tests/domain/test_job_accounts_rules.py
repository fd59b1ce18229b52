"""Whose account a job may run as (issue 29): root and system accounts refused unless the head
allows them, the built-in admin as the head's own account, one account per user unless shared;
and what a node says of the walls it cannot hold."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpupool.domain.errors import Conflict, InvalidInput
from gpupool.domain.users import Role, User
from gpupool.node.cgroups import Layout
from gpupool.node.walls import isolation
from gpupool.usecases.accounts import JobAccounts

UIDS = {"root": 0, "daemon": 1, "nobody": 65534, "ann": 1001, "lab": 1002}


def accounts(**kw: object) -> JobAccounts:
    return JobAccounts(owners=True, head_user="root", uid_of=UIDS.get, uid_min=1000, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("user", "account", "allow", "refused"),
    [
        ("ann", "ann", False, None),
        ("ann", "root", False, "system_account"),
        ("ann", "daemon", False, "system_account"),
        ("ann", "nobody", False, None),  # past UID_MAX is not refused: directory (LDAP, AD) uids run past it
        ("ann", "ghost", False, "no_unix_account"),
        ("ann", "root", True, None),
        ("ann", "daemon", True, None),
        ("admin", "root", False, None),  # the head's own jobs run as the head's account
    ],
)
def test_which_accounts_a_users_jobs_may_run_as(user: str, account: str, allow: bool, refused: str | None) -> None:
    rules = accounts(allow_system=allow)
    if refused is None:
        rules.check(user, account)
        return
    with pytest.raises(InvalidInput) as caught:
        rules.check(user, account)
    assert caught.value.code == refused
    if refused == "system_account":
        assert "--allow-system-accounts" in str(caught.value) and f"set-unix-user {user}" in str(caught.value)


def test_where_the_head_cannot_look_accounts_up_root_is_still_refused_by_name() -> None:
    remote = JobAccounts(owners=True, head_user="root", uid_of=None)
    with pytest.raises(InvalidInput, match="root"):
        remote.check("ann", "root")
    remote.check("ann", "daemon")  # the node checks the uid at launch


def test_one_account_per_user_unless_shared() -> None:
    now = datetime(2026, 11, 27, tzinfo=UTC)
    users = [User("gus", Role.MEMBER, "lab", False, now), User("ann", Role.MEMBER, None, False, now)]
    rules = accounts()
    with pytest.raises(Conflict, match="already gus's") as caught:
        rules.check_unshared("hal", "lab", users, shared=False)
    assert caught.value.code == "account_taken" and "--shared-account" in str(caught.value)
    with pytest.raises(Conflict, match="already ann's"):  # ann's account is the one of her name
        rules.check_unshared("hal", "ann", users, shared=False)
    rules.check_unshared("hal", "lab", users, shared=True)
    rules.check_unshared("gus", "lab", users, shared=False)  # remapping a user onto their own account
    JobAccounts(owners=False).check_unshared("hal", "lab", users, shared=False)  # single-user: moot


def test_a_node_says_which_walls_it_cannot_hold_and_why() -> None:
    layout = Layout(
        "/sys/fs/cgroup", "gpupool", notes=("devices: no cgroup v2 device program (Operation not permitted)",)
    )
    said = isolation(layout, as_owners=False, scratch_why="not root: jobs share the node's /tmp and /dev/shm")
    assert said["devices"] == "none (CUDA_VISIBLE_DEVICES only: no cgroup v2 device program (Operation not permitted))"
    assert said["tmp"] == "none (shared /tmp and /dev/shm: not root: jobs share the node's /tmp and /dev/shm)"
    assert said["proc"].startswith("none (every process visible")
    held = isolation(
        Layout("/sys/fs/cgroup", "gpupool", unified="/sys/fs/cgroup", device_program=True), True, None, True
    )
    assert held["devices"] == "cgroup v2 device program (BPF)" and held["tmp"].startswith("private")
    assert held["proc"].startswith("hidepid=2")
    assert isolation(None, True, None, False)["proc"].startswith("none (this kernel shares one set of /proc options")

"""Unix accounts jobs run as: looked up on the node that runs them.

Where the node runtime runs as root, each worker drops to its owner's account (uid, primary and
supplementary groups) between fork and exec, so a job can read what its owner can and nothing of
the head's: its data dir is root's, 0700. Where it does not run as root, every job runs as the
runtime's own user (single-user mode) and the node says so. Standard library only: the supervisor
applies an ``Account`` and must start cheaply.
"""

from __future__ import annotations

import os
import pwd
from typing import Any, NamedTuple


class Account(NamedTuple):
    """A Unix account as a worker takes it on (a ``NamedTuple``: the supervisor reads it, and
    ``dataclasses`` costs each supervisor start ~20 ms; see ``node/rundir.py``)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # every group it belongs to, its primary one included
    home: str
    shell: str

    def env(self) -> dict[str, str]:
        """What a login would set: a job's HOME and USER are its owner's, not the head's."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name, "SHELL": self.shell or "/bin/sh"}

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "groups": list(self.groups)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Account:
        return cls(
            name=str(data["name"]),
            uid=int(data["uid"]),
            gid=int(data["gid"]),
            groups=tuple(int(g) for g in data["groups"]),
            home=str(data["home"]),
            shell=str(data["shell"]),
        )

    def become(self) -> None:
        """Drop to this account, in the child between fork and exec: groups first, the uid last
        (after ``setuid`` nothing else may be changed), so there is no way back to root."""
        os.setgroups(list(self.groups))
        os.setgid(self.gid)
        os.setuid(self.uid)


def lookup(name: str) -> Account | None:
    """The account named ``name`` on this machine (from the passwd and group databases), or None."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    try:
        groups = tuple(sorted(set(os.getgrouplist(name, entry.pw_gid))))
    except OSError:
        groups = (entry.pw_gid,)
    return Account(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir, entry.pw_shell)


def uid_min(login_defs: str = "/etc/login.defs") -> int:
    """The first uid of a person's account on this machine (``UID_MIN``, 1000 unless it says)."""
    try:
        with open(login_defs) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "UID_MIN" and parts[1].isdigit():
                    return int(parts[1])
    except OSError:
        pass
    return DEFAULT_UID_MIN


def system_account(account: Account, first: int | None = None) -> str | None:
    """Why ``account`` is root or a system account (below UID_MIN), or None for a person's."""
    if account.uid == 0:
        return f"the Unix account {account.name!r} is root (uid 0)"
    limit = uid_min() if first is None else first
    if account.uid < limit:
        return f"the Unix account {account.name!r} is a system account (uid {account.uid}, below UID_MIN {limit})"
    return None


DEFAULT_UID_MIN = 1000
SYSTEM_HINT = "jobs never run as one unless the head allows it (gpupool up --allow-system-accounts)"


def me() -> str:
    """The name of the account this process runs as."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def privileged() -> bool:
    """Whether this process may run jobs as other accounts (it is root)."""
    return os.geteuid() == 0

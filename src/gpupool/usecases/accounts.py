"""Whose Unix account a job runs as: decided once, at submit, and kept on the job.

Fixed at submit as Slurm fixes a job's uid: remapping a user later changes their next jobs, never
one that already waits or runs. Where the nodes are this very machine (the local backend) the head
can tell whether the account exists and refuses the job at once; elsewhere (Ray) each node looks
it up at launch and a missing one ends the worker with ``exit_reason: no_unix_account``.

No job runs as root or a system account (uid below the machine's ``UID_MIN``) unless the head was
started with ``--allow-system-accounts`` (Slurm's ``DisableRootJobs=NO``); the built-in admin's
jobs run as the head's own account, root where the head is root. Two users on one account could
read and signal each other's work: a mapping onto an account another user has is refused unless
an admin says ``--shared-account``. The nodes check the uid again at launch (``node/runtime.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpupool.domain.errors import Conflict, InvalidInput
from gpupool.domain.users import ADMIN_USER, User
from gpupool.executors.base import Executor
from gpupool.node import accounts

ROOT = "root"
ALLOW_SYSTEM = "--allow-system-accounts"


@dataclass(frozen=True, slots=True)
class JobAccounts:
    # False: single-user mode (gpupool does not run as root): every job runs as the node's own user.
    owners: bool = False
    # The built-in admin has no person behind it: its jobs run as the head's own account.
    head_user: str = "root"
    # An account's uid, None where there is no such account, where the head can tell (its nodes are
    # this machine); None: it cannot, and the nodes check at launch.
    uid_of: Callable[[str], int | None] | None = None
    uid_min: int = 1000  # the machine's UID_MIN: below it, system accounts
    allow_system: bool = False  # gpupool up --allow-system-accounts

    def account_of(self, user: str, unix_user: str | None) -> str:
        """The account ``user``'s jobs run as: the one they are mapped to, else the same name."""
        return unix_user or (self.head_user if user == ADMIN_USER else user)

    def run_as(self, user: str, unix_user: str | None) -> str | None:
        """The account a job of ``user`` runs as; None in single-user mode. A 4xx when the head
        can tell that the account does not exist, or that it is root or a system account."""
        if not self.owners:
            return None
        account = self.account_of(user, unix_user)
        self.check(user, account)
        return account

    def check(self, user: str, account: str) -> None:
        if user == ADMIN_USER and account == self.head_user:
            return  # the head's own jobs: said in gpupool nodes and the ready line
        uid = 0 if account == ROOT else None
        if self.uid_of is not None:
            uid = self.uid_of(account)
            if uid is None:
                raise InvalidInput(
                    f"{user}'s jobs run as the Unix account {account!r}, which does not exist on this machine: "
                    f"an admin creates it (useradd {account}) or maps {user} to one "
                    f"(gpupool user set-unix-user {user} ACCOUNT)",
                    code="no_unix_account",
                )
        if uid is None or self.allow_system or (uid >= self.uid_min and uid != 0):
            return
        what = "root (uid 0)" if uid == 0 else f"a system account (uid {uid}, below UID_MIN {self.uid_min})"
        raise InvalidInput(
            f"{user}'s jobs would run as the Unix account {account!r}, which is {what}: "
            f"map {user} to a person's account (gpupool user set-unix-user {user} ACCOUNT), "
            f"or start the head with {ALLOW_SYSTEM} to allow it",
            code="system_account",
        )

    def check_unshared(self, user: str, account: str, users: Iterable[User], shared: bool) -> None:
        """Refuse mapping ``user`` onto an account another user's jobs run as, unless ``shared``."""
        if not self.owners or shared:
            return
        others = sorted(u.name for u in users if u.name != user and self.account_of(u.name, u.unix_user) == account)
        if others:
            raise Conflict(
                f"the Unix account {account!r} is already {', '.join(others)}'s: users on one account can read "
                f"and signal each other's jobs; map {user} to an account of their own, or pass --shared-account "
                "if they are meant to share it",
                code="account_taken",
            )


def job_accounts(executor: Executor, allow_system: bool = False) -> JobAccounts:
    """As root, jobs run as their owners (checked here at submit where the nodes are this
    machine); otherwise as the head's own user."""
    local = not executor.capabilities.multi_host
    return JobAccounts(
        owners=accounts.privileged(),
        head_user=accounts.me(),
        uid_of=_KnownAccounts() if local else None,
        uid_min=accounts.uid_min(),
        allow_system=allow_system,
    )


class _KnownAccounts:
    """A Unix account's uid here (None: no such account), remembered for a minute: a submission
    should not read the passwd and group databases each time (a change meanwhile is caught at
    launch, where the node looks again)."""

    TTL_S = 60.0

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, int]] = {}

    def __call__(self, name: str) -> int | None:
        now = time.monotonic()
        seen = self._seen.get(name)
        if seen is not None and now - seen[0] < self.TTL_S:
            return seen[1]
        account = accounts.lookup(name)
        if account is None:
            return None
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen[name] = (now, account.uid)
        return account.uid

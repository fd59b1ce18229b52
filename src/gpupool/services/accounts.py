"""Whose Unix account a job runs as: decided once, at submit, and kept on the job.

Fixed at submit as Slurm fixes a job's uid: remapping a user later changes their next jobs, never
one that already waits or runs. Where the nodes are this very machine (the local backend) the head
can tell whether the account exists and refuses the job at once; elsewhere (Ray) each node looks
it up at launch and a missing one ends the worker with ``exit_reason: no_unix_account``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpupool.domain.errors import InvalidInput
from gpupool.domain.users import ADMIN_USER


@dataclass(frozen=True, slots=True)
class JobAccounts:
    # False: single-user mode (gpupool does not run as root): every job runs as the node's own user.
    owners: bool = False
    # The built-in admin has no person behind it: its jobs run as the head's own account.
    head_user: str = "root"
    # Whether an account exists, where the head can tell (its nodes are this machine); None: it cannot.
    exists: Callable[[str], bool] | None = None

    def account_of(self, user: str, unix_user: str | None) -> str:
        """The account ``user``'s jobs run as: the one they are mapped to, else the same name."""
        return unix_user or (self.head_user if user == ADMIN_USER else user)

    def run_as(self, user: str, unix_user: str | None) -> str | None:
        """The account a job of ``user`` runs as; None in single-user mode. A 4xx when the head
        can tell that the account does not exist."""
        if not self.owners:
            return None
        account = self.account_of(user, unix_user)
        self.check(user, account)
        return account

    def check(self, user: str, account: str) -> None:
        if self.exists is None or self.exists(account):
            return
        raise InvalidInput(
            f"{user}'s jobs run as the Unix account {account!r}, which does not exist on this machine: "
            f"an admin creates it (useradd {account}) or maps {user} to one "
            f"(gpupool user set-unix-user {user} ACCOUNT)",
            code="no_unix_account",
        )

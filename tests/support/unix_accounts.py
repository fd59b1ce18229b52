"""Unix accounts for the tests' people, made by the tests themselves.

As root, gpupool runs each job as its owner's Unix account and refuses a job whose owner has none,
so a test's "ann" needs one: ``accounts.make("ann")`` creates ``gpt-ann`` (no home, no password,
in the supplementary group ``gpt-lab``) and the test maps ann to it (``--unix-user``). They are
removed when the test session ends. Not root: the head runs single-user, no account is checked or
needed, and ``make`` only returns the name.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import subprocess

PREFIX = "gpt-"
SHARED_GROUP = "gpt-lab"  # every test account's supplementary group: what "and its groups" is tested by


class TestAccounts:
    __test__ = False  # not a test class

    def __init__(self) -> None:
        self.made: list[str] = []
        self.root = os.geteuid() == 0

    def make(self, person: str) -> str:
        name = PREFIX + person
        if not self.root:
            return name
        if not _group_exists(SHARED_GROUP):
            _run("groupadd", SHARED_GROUP)
        try:
            pwd.getpwnam(name)
        except KeyError:
            _run("useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", "-G", SHARED_GROUP, name)
            self.made.append(name)
        return name

    def remove_all(self) -> None:
        for name in self.made:
            with contextlib.suppress(subprocess.CalledProcessError):
                _run("userdel", name)
        self.made.clear()


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)

"""Suite-wide settings.

Hypothesis explores new random examples on every local run; under CI (CI=true) it runs a fixed,
derandomized set, so a submission's result does not depend on the luck of the draw. A failure
found locally is kept in .hypothesis/ and replayed until fixed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.unix_accounts import TestAccounts

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def unix_accounts() -> Iterator[TestAccounts]:
    """Unix accounts for the tests' people (tests/unix_accounts.py), removed when the session ends."""
    made = TestAccounts()
    yield made
    made.remove_all()

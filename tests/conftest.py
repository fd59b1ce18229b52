"""Suite-wide settings.

Hypothesis explores new random examples on every local run; under CI (CI=true) it runs a fixed,
derandomized set, so a submission's result does not depend on the luck of the draw. A failure
found locally is kept in .hypothesis/ and replayed until fixed.

Where gpupool runs as root, a job's /tmp is its own (issue 29): the files tests hand to jobs and
read back (gates, scripts, markers, heads' data dirs) live under /var/tmp instead, which jobs see.
pytest's own temp root moves there (PYTEST_DEBUG_TEMPROOT, read when the first tmp_path is made),
with pytest's usual numbered directories and retention. Set it yourself to put them elsewhere.

The tests' shared fakes, builders and fixtures live in tests/support (no test module imports
another; tests/architecture/test_test_imports.py checks it): its asserts are rewritten as a test
module's are, and its database fixtures (``db``, ``db_url``, ``now``, ``ctx``) are a plugin here,
so the tests of any folder may take them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

pytest.register_assert_rewrite("tests.support")

from tests.support.unix_accounts import TestAccounts  # noqa: E402

pytest_plugins = ["tests.support.database"]

if os.geteuid() == 0 and os.path.isdir("/var/tmp"):
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", "/var/tmp")

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def unix_accounts() -> Iterator[TestAccounts]:
    """Unix accounts for the tests' people (tests/support/unix_accounts.py), removed when the session ends."""
    made = TestAccounts()
    yield made
    made.remove_all()

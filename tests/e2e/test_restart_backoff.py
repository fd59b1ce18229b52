"""A job that keeps failing backs off (issue 15, part 3): each restart waits twice as long as the
one before, from --restart-backoff, with reason ``backoff`` and the time it ends; the old way, 37
restarts in 20 seconds, is gone."""

from __future__ import annotations

import itertools
from datetime import datetime

import pytest

from gpupool.domain.outcome import RESTART_BACKOFF_CAP_S, restart_delay
from tests.support.headproc import HeadProcess, wait_for, wait_state

pytestmark = pytest.mark.e2e


def test_the_delay_doubles_per_failure_up_to_its_cap() -> None:
    assert [restart_delay(n, 10) for n in (0, 1, 2, 3, 4)] == [0, 10, 20, 40, 80]
    assert restart_delay(50, 10) == restart_delay(10**6, 10) == RESTART_BACKOFF_CAP_S
    assert restart_delay(3, 0) == 0  # --restart-backoff 0: at once


def test_a_failing_job_waits_longer_before_each_restart(head_factory: type[HeadProcess]) -> None:
    head = head_factory(extra=["--restart-backoff", "0.5s"]).start()
    with head.client() as c:
        job_id = c.submit(command=["false"], gpus=1, max_restarts=3, name="crashloop")["id"]
        waiting = wait_for(
            lambda: (j := c.job(job_id))["reason_code"] == "backoff" and j, timeout=20, what="the first back-off"
        )
        assert waiting["state"] == "pending" and "restart 1 waits 0.5s after the failure" in waiting["reason"]
        assert "scheduled again from " in waiting["reason"]
        assert c.why(job_id)["reason_code"] == "backoff"
        done = wait_state(c, job_id, ("failed",), timeout=30)
    assert done["restarts"] == 3 and done["starts"] == 4
    starts = [datetime.fromisoformat(e["time"]) for e in done["events"] if e["kind"] == "starting"]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert len(gaps) == 3 and gaps[0] >= 0.5 and gaps[1] >= 1 and gaps[2] >= 2, gaps
    assert [e["kind"] for e in done["events"]].count("backoff") == 3

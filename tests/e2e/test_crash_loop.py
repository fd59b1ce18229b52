"""A replica that cannot start backs off (issue 30, part 7): it is one job started again after a
wait that doubles with each failure in a row (Kubernetes' CrashLoopBackOff), not a new job twice a
second; the service says crash_loop, and `service show` names the last exit and its log's end."""

from __future__ import annotations

import json
import time

import pytest

from gpupool.domain.outcome import CRASH_RESET_S, failures_in_a_row, restart_delay
from tests.support.headproc import HeadProcess, wait_for

pytestmark = pytest.mark.e2e


def test_the_doubling_counts_failures_in_a_row_and_a_long_run_starts_it_over() -> None:
    assert failures_in_a_row([1.0, 2.0, None, 3.0]) == 4
    assert failures_in_a_row([1.0, CRASH_RESET_S + 1, 2.0]) == 1  # ran for long before: a first failure again
    assert failures_in_a_row([]) == 0
    assert [restart_delay(n, 10) for n in (1, 2, 3, 4, 5, 6)] == [10, 20, 40, 80, 160, 300]  # 5 minutes at most


def test_a_replica_that_cannot_start_is_one_job_backing_off_and_the_service_says_crash_loop(
    head_factory: type[HeadProcess],
) -> None:
    head = head_factory(extra=["--restart-backoff", "1s"]).start()
    started = time.monotonic()
    out = head.cli(
        "serve", "broken", "--gpus", "0", "-o", "json", "--", "sh", "-c", "echo cannot load the model >&2; exit 3"
    )
    assert out.returncode == 0, out.stderr

    def looping() -> dict[str, object] | None:
        s = json.loads(head.cli("service", "show", "broken", "-o", "json").stdout)
        crash = s.get("crash_loop")
        return s if s["state"] == "crash_loop" and crash and crash["restarts"] >= 3 else None

    s = wait_for(looping, 60, 0.5, "the service to crash-loop three times")
    elapsed = time.monotonic() - started
    crash = s["crash_loop"]
    assert isinstance(crash, dict)
    assert crash["exit_code"] == 3 and any("cannot load the model" in line for line in crash["log_tail"]), crash
    with head.client() as c:
        jobs = [j for j in c.jobs(include_finished=True) if j["name"] == "broken"]
    assert len(jobs) == 1, jobs  # one job's restarts, not a job per try
    with head.client() as c:
        waits = [
            e["message"].split(" waits ")[1].split()[0]
            for e in c.job(jobs[0]["id"])["events"]
            if e["kind"] == "backoff"
        ]
    assert waits[:3] == ["1s", "2s", "4s"], waits  # doubling: the fourth try waits 4 s
    assert elapsed >= 3, elapsed  # 1 + 2 s of back-off before the third failure: it cannot have come sooner
    print(f"3 failures in {elapsed:.1f}s, waits {waits}")
    table = head.cli("service", "show", "broken")
    assert table.returncode == 0, table.stderr
    assert f"crash loop: replica job {crash['job_id']} failed" in table.stdout and "last exit 3" in table.stdout
    assert "cannot load the model" in table.stdout and "[bold]" not in table.stdout

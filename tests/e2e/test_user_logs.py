"""--max-user-logs end to end (issue 30, part 6): ten array tasks of one person grew a head's data
dir from 56 MB to 1 GB. Now, past the cap, the logs of the owner's oldest finished jobs are emptied
first, on the node itself; ``gpupool logs`` and the job's events say why, the newest stay whole."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.client import GpupoolClient
from tests.support.headproc import HeadProcess, free_port, wait_for, wait_state

pytestmark = pytest.mark.e2e

CHATTY = "import sys; sys.stdout.write('x' * 400_000 + '\\n')"  # 400 KB of log each


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    made = HeadProcess(tmp_path_factory.mktemp("userlogs") / "data", nodes=1, extra=["--max-user-logs", "1M"]).start()
    yield made
    made.kill_everything()


def test_past_the_cap_the_oldest_finished_jobs_logs_are_emptied_and_said(head: HeadProcess) -> None:
    with head.client() as c:
        jobs = []
        for _ in range(3):  # one after the other, so that "oldest" is plain
            jobs.append(int(c.submit(command=[sys.executable, "-c", CHATTY], gpus=0)["id"]))
            wait_state(c, jobs[-1], ("succeeded",), 60)
        oldest, *newer = jobs

        def emptied() -> list[str]:
            return [e["message"] for e in c.job(oldest)["events"] if e["kind"] == "logs_emptied"]

        said = wait_for(emptied, 60, 0.5, "the oldest job's logs to be emptied")
        assert "admin's logs passed --max-user-logs (1M)" in said[0], said
        shown = log_of(c, oldest)
        assert shown.startswith("gpupool: this log was emptied: admin's logs passed --max-user-logs (1M)"), shown
        assert all(len(log_of(c, j)) > 400_000 for j in newer)  # 0.8 MB with the note: under the cap
        assert all(not [e for e in c.job(j)["events"] if e["kind"] == "logs_emptied"] for j in newer)
    out = head.cli("logs", str(oldest))
    assert out.returncode == 0 and "--max-user-logs" in out.stdout, out.stdout + out.stderr


def log_of(c: GpupoolClient, job_id: int) -> str:
    text = b""
    while True:
        chunk = c.logs(job_id, 0, len(text))
        text += chunk.data
        if chunk.finished or not chunk.data:
            return text.decode()


@pytest.mark.parametrize("value", ["512K", "2T", "lots"])
def test_a_cap_out_of_bounds_stops_the_head_in_one_line(head: HeadProcess, tmp_path: Path, value: str) -> None:
    out = head.cli("up", "--port", str(free_port()), "--data-dir", str(tmp_path), "--max-user-logs", value)
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "--max-user-logs" in out.stderr

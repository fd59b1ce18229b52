"""A chatty job cannot fill the disk (issue 15, part 5): past --max-log-size its log keeps its
newest half behind a note that says what was cut, on a real head with a real worker."""

from __future__ import annotations

import sys

import pytest

from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e

CHATTY = (
    "import sys, time\n"
    "for i in range(40):\n"
    "    sys.stdout.write(f'{i:04d} ' + 'x' * 99_994 + '\\n'); sys.stdout.flush(); time.sleep(0.05)\n"
    "print('the end', flush=True)\n"
)


def test_a_log_past_max_log_size_keeps_its_newest_half(head_factory: type[HeadProcess]) -> None:
    head = head_factory(extra=["--max-log-size", "1M"]).start()
    with head.client() as c:
        job = c.submit(command=[sys.executable, "-c", CHATTY], gpus=0)
        done = wait_state(c, job["id"], ("succeeded", "failed"), timeout=60)
        text = c.logs(job["id"]).data.decode()
    assert done["state"] == "succeeded"
    log = head.data_dir / "nodes" / done["placements"][0]["node"] / "logs" / f"job-{job['id']}" / "worker-0.log"
    assert log.stat().st_size <= 2**20, log.stat().st_size  # capped once more as the worker ended
    assert text.startswith("gpupool: this log passed --max-log-size (1048576 bytes): at least its first ")
    assert text.rstrip().endswith("the end") and "0039 " in text and "0000 " not in text

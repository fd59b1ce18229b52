"""--max-user-logs on a node (node/log_cap.py): each job's logs summed from the files, and a
finished job's logs emptied down to the one line that says why."""

from __future__ import annotations

from pathlib import Path

from gpupool.node.log_cap import empty_job_logs, job_log_sizes


def test_each_jobs_logs_are_summed_and_emptied_to_a_note(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    for job, sizes in {7: (1000, 3000), 8: (20,)}.items():
        (logs / f"job-{job}").mkdir(parents=True)
        for worker, size in enumerate(sizes):
            (logs / f"job-{job}" / f"worker-{worker}.log").write_bytes(b"x" * size)
    (logs / "not-a-job").mkdir()
    assert job_log_sizes(tmp_path) == {7: 4000, 8: 20}
    note = "gpupool: this log was emptied"
    assert empty_job_logs(tmp_path, 7, note) == 4000 - 2 * (len(note) + 1)
    assert (logs / "job-7" / "worker-1.log").read_text() == note + "\n"
    assert empty_job_logs(tmp_path, 8, note) == 0  # smaller than the note: left as it is
    assert empty_job_logs(tmp_path, 9, note) == 0  # none here
    assert job_log_sizes(tmp_path) == {7: 2 * (len(note) + 1), 8: 20}
    assert job_log_sizes(tmp_path / "elsewhere") == {}

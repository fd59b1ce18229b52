"""The simulator replays per-user limits (issue 34 item 4): a projects file's ``user_limit`` column
reaches the scheduler's snapshot, so a trace's user waits for their own jobs as on the head."""

from __future__ import annotations

from pathlib import Path

from gpupool.domain.jobs import JobSpec
from gpupool.sim.cluster import load_projects, uniform
from gpupool.sim.engine import simulate
from gpupool.sim.trace_job import TraceJob


def test_a_projects_file_user_limit_holds_a_users_jobs_in_a_replay(tmp_path: Path) -> None:
    path = tmp_path / "projects.csv"
    path.write_text("name,quota,limit,weight,user_limit\nlab,8,,1,2\nnlp,0,,1,\n")
    projects = load_projects(path)
    assert [(p.name, p.user_limit) for p in projects] == [("lab", 2.0), ("nlp", None)]
    spec = JobSpec.create(command=["true"], gpus=1, project="lab")
    jobs = [TraceJob(f"ann-{i}", 0.0, 100.0, spec, user="ann") for i in range(4)]
    jobs.append(TraceJob("bob-0", 0.0, 100.0, spec, user="bob"))
    result = simulate(jobs, uniform(1, 8), projects)
    starts = sorted((run.trace.job_id, run.first_start) for run in result.runs.values())
    assert starts == [("ann-0", 0.0), ("ann-1", 0.0), ("ann-2", 100.0), ("ann-3", 100.0), ("bob-0", 0.0)]

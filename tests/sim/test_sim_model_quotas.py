"""The simulator replays per-model quotas and lend limits (issue 34 items 2 and 3): a projects
file's ``quota_by_model``/``limit_by_model`` (``H100=8;A100=16``: semicolons, since a comma would
end the CSV cell) and ``lend_limit`` columns reach the scheduler's snapshot, checked as
``gpupool project set`` checks them, so a trace can be replayed under them before they are set."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.cli.main import main
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec
from gpupool.sim.cluster import load_cluster, load_projects
from gpupool.sim.engine import simulate
from gpupool.sim.trace_job import TraceJob

COLUMNS = "name,quota,limit,weight,user_limit,parent,quota_by_model,limit_by_model,lend_limit"
MIXED = "name,gpus,gpu_model\nh,4,H100\na,4,A100\n"  # 4 H100s and 4 A100s


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def starts(tmp_path: Path, projects: str, cluster: str, jobs: list[tuple[str, str]]) -> list[float]:
    """When each of ``jobs`` (id, project; 1 GPU for 100 s, all at 0) first starts, in id order."""
    listed = load_projects(write(tmp_path, "projects.csv", projects))
    nodes = load_cluster(write(tmp_path, "cluster.csv", cluster))
    trace = [TraceJob(i, 0.0, 100.0, JobSpec.create(command=["true"], gpus=1, project=p)) for i, p in jobs]
    result = simulate(trace, nodes, listed)
    return [run.first_start for _, run in sorted((r.trace.job_id, r) for r in result.runs.values())]


def test_the_per_model_columns_are_read(tmp_path: Path) -> None:
    text = f"{COLUMNS}\nlab,,,,,,H100=4;A100=2,H100=6;A100=2,1\nnlp,3,,,,,,,\n"
    lab, nlp = load_projects(write(tmp_path, "projects.csv", text))
    assert (lab.quota, lab.quota_by_model, lab.limit_by_model, lab.lend_limit) == (
        6.0,  # a blank quota is the per-model quotas' sum, as --quota H100=4,A100=2 is
        {"A100": 2.0, "H100": 4.0},
        {"A100": 2.0, "H100": 6.0},
        1.0,
    )
    assert (nlp.quota, nlp.quota_by_model, nlp.limit_by_model, nlp.lend_limit) == (3.0, {}, {}, None)


def test_a_per_model_limit_holds_a_project_to_its_model_in_a_replay(tmp_path: Path) -> None:
    jobs = [(f"lab-{i}", "lab") for i in range(6)]
    assert starts(tmp_path, "name,quota\nlab,0\n", MIXED, jobs) == [0.0] * 6  # without it: both models
    held = f"{COLUMNS}\nlab,0,,,,,,A100=0,\n"  # no A100 at all: the H100s only
    assert starts(tmp_path, held, MIXED, jobs) == [0.0] * 4 + [100.0] * 2


def test_a_lend_limit_keeps_unused_quota_idle_in_a_replay(tmp_path: Path) -> None:
    jobs = [(f"nlp-{i}", "nlp") for i in range(4)]
    cluster = "name,gpus,gpu_model\nn,4,GPU\n"
    assert starts(tmp_path, "name,quota\nlab,2\nnlp,0\n", cluster, jobs) == [0.0] * 4  # lab lends its 2 idle GPUs
    kept = f"{COLUMNS}\nlab,2,,,,,,,0\nnlp,0,,,,,,,\n"  # lab lends none: 2 stay idle for it
    assert starts(tmp_path, kept, cluster, jobs) == [0.0, 0.0, 100.0, 100.0]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("lab,8,,,,,H100=x,,", r"projects.csv:2: .*quota_by_model 'H100=x': 'x' is not a number of GPUs"),
        ("lab,8,,,,,H100=4;H100=2,,", "model H100 given twice"),
        ("lab,8,,,,,8;H100=4,,", "MODEL=N pairs only"),
        ("lab,2,,,,,H100=4,,", r"quota 2 is below its per-model quotas' sum 4 \(H100 4\)"),
        ("lab,8,,,,,H100=4,H100=2,", "limit H100=2 is below quota H100=4"),
        ("lab,8,,,,,,,-1", "lend limit must be a number from 0"),
        ("lab,8,,,,,,,x", "could not convert"),
    ],
)
def test_a_bad_cell_is_refused_naming_the_row(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        load_projects(write(tmp_path, "projects.csv", f"{COLUMNS}\n{row}\n"))


def test_simulate_refuses_a_bad_cell_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write(tmp_path, "trace.csv", "job_id,submit_time,duration,gpus,workers,project\nx,0,10,1,1,lab\n")
    projects = write(tmp_path, "projects.csv", f"{COLUMNS}\nlab,8,,,,,H100=8,A100,\n")
    with pytest.raises(SystemExit) as exited:
        main(["simulate", str(trace), "--nodes", "1", "--projects", str(projects)])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{projects}:2: not a project row" in line and "limit_by_model 'A100'" in line


@pytest.mark.parametrize(
    ("command", "models"),
    [
        (["simulate", "--cluster", "CLUSTER"], "A100, H100"),
        (["simulate", "--nodes", "1", "--gpu-model", "H100"], "H100"),
        (["plan", "--target-queue-p95", "1h", "--gpu-model", "H100", "--gpus-per-node", "4"], "H100"),
    ],
)
def test_a_per_model_figure_for_a_model_no_node_has_is_refused_naming_the_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], models: str
) -> None:
    """As ``gpupool project set`` refuses it: a figure for a model the replayed cluster lacks never binds."""
    trace = write(tmp_path, "trace.csv", "job_id,submit_time,duration,gpus,workers,project\nx,0,10,1,1,nlp\n")
    cluster = write(tmp_path, "cluster.csv", MIXED)
    fine = write(tmp_path, "fine.csv", f"{COLUMNS}\nlab,8,,,,,H100=4,,\nnlp,0,,,,,,,\n")
    projects = write(tmp_path, "projects.csv", f"{COLUMNS}\nlab,8,,,,,H100=4,,\nnlp,2,,,,,,H200=1,\n")
    args = [a.replace("CLUSTER", str(cluster)) for a in command]
    with pytest.raises(SystemExit) as exited:
        main([args[0], str(trace), *args[1:], "--projects", str(projects)])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{projects}:3: project nlp: no node has a GPU of model H200; models here: {models}" in line
    with pytest.raises(SystemExit) as exited:
        main([args[0], str(trace), *args[1:], "--projects", str(fine), "-o", "json"])  # H100 is there: replayed
    assert exited.value.code == 0

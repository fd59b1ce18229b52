"""The simulator takes a tree of projects (issue 34 item 7): a projects file with a ``parent``
column, checked as ``gpupool project set --parent`` checks it, replayed by the real scheduler
(a unit's limit holds back the projects below it), and reported per unit beside per project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app, main
from gpupool.domain.errors import InvalidInput
from gpupool.scheduler.policies import preset
from gpupool.sim.cluster import check_leaves, load_projects, uniform
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.trace import load

HEADER = "job_id,submit_time,duration,gpus,workers,project"
# a and b, 2 GPUs each at 0 for 100 s, on one 4-GPU node: side by side in a flat list; under a
# unit lab limited to 2 GPUs, b waits for a.
ROWS = ["a1,0,100,2,1,a", "b1,0,100,2,1,b"]
FLAT = "name,quota\na,1\nb,1\nc,2\n"
TREE = "name,quota,limit,weight,parent\nlab,2,2,,\na,1,,,lab\nb,1,,,lab\nfaculty,2,,,\nc,2,,,faculty\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def replay(tmp_path: Path, projects: str) -> dict[str, object]:
    trace = write(tmp_path, "trace.csv", "\n".join([HEADER, *ROWS]) + "\n")
    listed = load_projects(write(tmp_path, "projects.csv", projects))
    return summarize(simulate(load(trace), uniform(1, 4), listed, preset("default")), 0.0)


def test_the_parent_column_builds_the_tree(tmp_path: Path) -> None:
    listed = {p.name: p for p in load_projects(write(tmp_path, "projects.csv", TREE))}
    assert {name: p.parent for name, p in listed.items()} == {
        "lab": None,
        "a": "lab",
        "b": "lab",
        "faculty": None,
        "c": "faculty",
    }
    assert (listed["lab"].quota, listed["lab"].limit, listed["a"].limit) == (2.0, 2.0, None)
    helios = load_projects(write(tmp_path, "vc.csv", "vc,node num,parent\nx,0,\ny,1,\nz,1,vc-y\n"), 4)
    assert [(p.name, p.quota, p.parent) for p in helios] == [("vc-x", 0, None), ("vc-y", 4, None), ("vc-z", 4, "vc-y")]


def test_a_units_limit_holds_back_its_projects_and_the_report_says_so_per_unit(tmp_path: Path) -> None:
    flat = replay(tmp_path, FLAT)
    assert "per_unit" not in flat  # a flat list reports as before
    assert flat["avg_queue_s"] == 0.0
    tree = replay(tmp_path, TREE)
    per_project = tree["per_project"]
    assert isinstance(per_project, dict)
    assert (per_project["a"]["p95_queue_s"], per_project["b"]["p95_queue_s"]) == (0.0, 100.0)
    assert tree["per_unit"] == {
        "faculty": {
            "parent": None,
            "projects": 0,
            "jobs": 0,
            "started": 0,
            "completed": 0,
            "avg_queue_s": None,
            "p95_queue_s": None,
            "avg_slowdown": None,
        },
        "lab": {
            "parent": None,
            "projects": 2,
            "jobs": 2,
            "started": 2,
            "completed": 2,
            "avg_queue_s": 50.0,
            "p95_queue_s": 100.0,
            "avg_slowdown": 1.5,
        },
    }


def test_units_at_any_depth_count_every_job_below_them(tmp_path: Path) -> None:
    deep = "name,quota,limit,weight,parent\nuni,4,,,\nlab,2,2,,uni\na,1,,,lab\nb,1,,,lab\n"
    rows = replay(tmp_path, deep)["per_unit"]
    assert isinstance(rows, dict)
    assert (rows["uni"]["parent"], rows["lab"]["parent"]) == (None, "uni")
    assert rows["uni"]["jobs"] == rows["lab"]["jobs"] == 2 and rows["uni"]["p95_queue_s"] == 100.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,quota,parent\na,1,nowhere\n", "no project nowhere to be a's parent"),
        ("name,quota,parent\na,1,b\nb,1,a\n", "cannot go under"),
        ("name,quota,parent\nlab,2,\na,2,lab\nb,1,lab\n", "lab has quota 2; its children's quotas would sum to 3"),
        ("name,quota,parent\na,1,a\n", "cannot be its own parent"),
    ],
)
def test_a_broken_tree_is_refused_naming_the_numbers(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        load_projects(write(tmp_path, "projects.csv", text))


def test_jobs_go_to_leaves_only(tmp_path: Path) -> None:
    projects = load_projects(write(tmp_path, "projects.csv", "name,quota,parent\nlab,2,\na,1,lab\n"))
    check_leaves(projects, ["a", "default"])
    with pytest.raises(InvalidInput, match="submits jobs to lab, which the projects file makes a unit"):
        check_leaves(projects, ["a", "lab"])


def test_simulate_prints_and_emits_the_per_unit_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, "trace.csv", "\n".join([HEADER, *ROWS]) + "\n")
    tree = write(tmp_path, "tree.csv", TREE)
    args = ["simulate", str(trace), "--nodes", "1", "--gpus-per-node", "4", "--projects", str(tree)]
    runner = CliRunner()
    out = runner.invoke(app, [*args, "-o", "json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["per_unit"]["lab"]["p95_queue_s"] == 100.0
    table = runner.invoke(app, args)
    assert "default: per unit" in table.output and "default: per project" in table.output
    assert "per_unit" not in table.output  # a table of its own, not a figure row
    unit_trace = write(tmp_path, "unit.csv", f"{HEADER}\nx,0,10,1,1,lab\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["simulate", str(unit_trace), "--nodes", "1", "--projects", str(tree)])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "the trace submits jobs to lab" in line

"""``gpupool plan --quotas`` (issue 34 item 7): the quotas that would have kept every project's and
unit's p95 queue time within a target on a fixed cluster, on traces small enough to follow by hand.

The trace: b starts four 1000 s jobs at 0 on four 1-GPU nodes, borrowing what it does not own; a
submits two 10 s jobs at 10 s. Reclaim takes back only a's quota, so with quota 1 a's second job
waits 10 s; with quota 2 both start at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app, main
from gpupool.scheduler.policies import preset
from gpupool.sim.cluster import load_projects, uniform
from gpupool.sim.quota_plan import plan_quotas
from gpupool.sim.trace import load

TRACE = "job_id,submit_time,duration,gpus,workers,project\n" + "".join(
    [*(f"b{i},0,1000,1,1,b\n" for i in range(4)), *(f"a{i},10,10,1,1,a\n" for i in range(2))]
)
ONE_LAB = "name,quota,limit,weight,parent\nlab,4,,,\na,1,,,lab\nb,3,,,lab\n"
TWO_FACULTIES = "name,quota,limit,weight,parent\nfa,1,,,\na,1,,,fa\nfb,3,,,\nb,3,,,fb\n"
FREE_ROOM = "name,quota\na,1\nb,2\n"  # one GPU no quota claims


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("projects", "proposed"),
    [
        (ONE_LAB, {"lab": 4, "a": 2, "b": 2}),  # from the sibling with most to spare; the unit is unchanged
        (TWO_FACULTIES, {"fa": 2, "a": 2, "fb": 2, "b": 2}),  # across units: both units move with them
        (FREE_ROOM, {"a": 2, "b": 2}),  # from GPUs no quota claims: nobody gives any
    ],
)
def test_the_late_project_gets_quota_and_units_keep_their_sums(
    tmp_path: Path, projects: str, proposed: dict[str, float]
) -> None:
    listed = load_projects(write(tmp_path, "projects.csv", projects))
    found = plan_quotas(load(write(tmp_path, "t.csv", TRACE)), uniform(4, 1), listed, preset("default"), 5.0, 10)
    assert found.met and found.why is None and found.replays == 2
    assert {r.name: r.proposed for r in found.rows} == proposed
    a = next(r for r in found.rows if r.name == "a")
    assert (a.quota, a.p95_before_s, a.p95_after_s, a.meets) == (1, 10, 0, True)
    assert all(r.meets for r in found.rows)
    assert [p.quota for p in found.projects] == list(proposed.values())


def test_a_limit_is_a_cap_the_search_does_not_lift(tmp_path: Path) -> None:
    capped = "name,quota,limit\na,1,1\nb,3,\n"
    listed = load_projects(write(tmp_path, "projects.csv", capped))
    found = plan_quotas(load(write(tmp_path, "t.csv", TRACE)), uniform(4, 1), listed, preset("default"), 5.0, 10)
    assert not found.met and found.replays == 1
    assert found.why is not None and found.why.startswith("at best a still waits longer; no quota can grow")
    assert {r.name: r.proposed for r in found.rows} == {"a": 1, "b": 3}


def test_plan_quotas_command_table_json_and_written_file(tmp_path: Path) -> None:
    trace, projects = write(tmp_path, "t.csv", TRACE), write(tmp_path, "p.csv", ONE_LAB)
    base = ["plan", str(trace), "--quotas", "--projects", str(projects), "--nodes", "4", "--gpus-per-node", "1"]
    out = tmp_path / "proposed.csv"
    table = CliRunner().invoke(app, [*base, "--target-queue-p95", "5s", "--write-projects", str(out)])
    assert table.exit_code == 0, table.output
    assert "PROPOSED" in table.output and "every project's and unit's p95 queue time ≤ 5s (2 replays)" in table.output
    assert {p.name: (p.quota, p.parent) for p in load_projects(out)} == {
        "lab": (4, None),
        "a": (2, "lab"),
        "b": (2, "lab"),
    }
    got = json.loads(CliRunner().invoke(app, [*base, "--target-queue-p95", "5s", "-o", "json"]).output)
    assert (got["met"], got["gpus"], got["replays"], got["target_queue_p95_s"]) == (True, 4, 2, 5)
    assert got["projects"][1] == {
        "name": "a",
        "parent": "lab",
        "unit": False,
        "quota": 1.0,
        "proposed_quota": 2.0,
        "p95_queue_s_before": 10.0,
        "p95_queue_s_after": 0.0,
        "meets": True,
    }
    write(tmp_path, "p.csv", "name,quota,limit\na,1,1\nb,3,\n")  # a's limit caps its quota at 1
    missed = CliRunner().invoke(app, [*base, "--target-queue-p95", "5s", "--write-projects", str(tmp_path / "x.csv")])
    assert missed.exit_code == 1
    assert missed.stderr.strip().startswith("no quotas meet a p95 queue time of 5s on this cluster: at best a")
    assert len(missed.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--nodes", "4"], "--nodes, --cluster and --write-projects go with --quotas"),
        (["--quotas", "--nodes", "4"], "--quotas needs --projects and one cluster"),
        (["--quotas", "--projects", "P"], "--quotas needs --projects and one cluster"),
        (["--quotas", "--projects", "P", "--nodes", "4", "--report", "r"], "--report and --power-* go with"),
        (["--quotas", "--projects", "P", "--nodes", "4", "--max-replays", "0"], "--max-replays must be >= 1"),
    ],
)
def test_bad_quota_options_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    trace, projects = write(tmp_path, "t.csv", TRACE), write(tmp_path, "p.csv", ONE_LAB)
    args = ["plan", str(trace), "--target-queue-p95", "5s", *(str(projects) if a == "P" else a for a in extra)]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert message in line

"""The pure parts of the Slurm side-by-side benchmark: config text, output parsing, the table's
numbers, and the shared submission loop. Nothing here starts Slurm or a head."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
cluster = importlib.import_module("slurm.cluster")
side_by_side = importlib.import_module("slurm_vs_gpupool")
burst_mod = importlib.import_module("_burst")

ROOT = Path("/tmp/slurm-bench-x")


def test_slurm_conf_gives_each_node_its_own_port_and_no_cgroup_plugins() -> None:
    layout = cluster.SlurmLayout(nodes=("n1", "n2"), gpus_per_node=4, cpus_per_node=16)
    text = cluster.slurm_conf(ROOT, "vm", 6817, [7001, 7002], layout)
    lines = text.splitlines()
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert [n.split()[0] for n in nodes] == ["NodeName=n1", "NodeName=n2"]
    assert "Port=7001" in nodes[0].split() and "Port=7002" in nodes[1].split()
    assert all("CPUs=16" in n.split() and "Gres=gpu:4" in n.split() for n in nodes)
    assert "SlurmdParameters=config_overrides" in lines
    assert "ProctrackType=proctrack/linuxproc" in lines and "TaskPlugin=task/none" in lines
    assert not any("cgroup" in line.lower() for line in lines)
    assert f"AuthInfo=socket={ROOT}/munge/munge.socket" in lines
    assert "PartitionName=bench Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP" in lines


def test_slurm_conf_wants_one_port_per_node() -> None:
    with pytest.raises(ValueError):
        cluster.slurm_conf(ROOT, "vm", 6817, [7001], cluster.SlurmLayout(nodes=("n1", "n2")))


def test_gres_conf_points_every_node_at_its_own_device_files() -> None:
    text = cluster.gres_conf(ROOT, cluster.SlurmLayout(nodes=("a", "b"), gpus_per_node=4))
    assert text.splitlines() == [
        "AutoDetect=off",
        f"NodeName=a Name=gpu File={ROOT}/dev/a/nvidia[0-3]",
        f"NodeName=b Name=gpu File={ROOT}/dev/b/nvidia[0-3]",
    ]


@pytest.mark.parametrize(
    ("output", "states"),
    [
        ("n1 idle\nn2 idle\n", {"n1": "idle", "n2": "idle"}),
        ("n1 idle*\nn2 mix\n\n", {"n1": "idle*", "n2": "mix"}),
        ("", {}),
    ],
)
def test_parse_node_states(output: str, states: dict[str, str]) -> None:
    assert cluster.parse_node_states(output) == states


@pytest.mark.parametrize(("output", "job_id"), [("123\n", "123"), ("45;bench\n", "45"), ("  7 ", "7")])
def test_parse_job_id(output: str, job_id: str) -> None:
    assert cluster.parse_job_id(output) == job_id


@pytest.mark.parametrize("output", ["", "sbatch: error: Batch job submission failed\n", "abc;bench"])
def test_parse_job_id_refuses_output_without_one(output: str) -> None:
    with pytest.raises(ValueError):
        cluster.parse_job_id(output)


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (927.4, "ms", "927 ms"),
        (89.2, "ms", "89 ms"),
        (7.94, "jobs/s", "7.9 jobs/s"),
        (0.974, "", "0.97"),
        (None, "", "—"),
    ],
)
def test_fmt_value(value: float | None, unit: str, text: str) -> None:
    assert side_by_side.fmt_value(value, unit) == text


def test_best_ratio_takes_gpupools_best_in_the_rows_direction() -> None:
    assert side_by_side.best_ratio(1000.0, [800.0, 100.0], "lower") == pytest.approx(0.1)
    assert side_by_side.best_ratio(100.0, [1.0, 90.0], "higher") == pytest.approx(0.9)
    assert side_by_side.best_ratio(100.0, [None, 50.0], "higher") == pytest.approx(0.5)
    assert side_by_side.best_ratio(None, [50.0], "higher") is None
    assert side_by_side.best_ratio(100.0, [None, None], "lower") is None


def test_table_prints_a_row_per_figure_and_says_when_a_build_lacks_arrays() -> None:
    out = {
        "systems": ["Slurm 22.05", "gpupool via its CLI", "gpupool via its API"],
        "rows": [
            {"key": "latency", "figure": "latency", "unit": "ms", "better": "lower"},
            {"key": "array", "figure": "array", "unit": "ms", "better": "lower"},
        ],
        "results": {
            "latency": {
                "Slurm 22.05": {"value": 927.0},
                "gpupool via its CLI": {"value": 820.0},
                "gpupool via its API": {"value": 89.0},
            },
            "array": {
                "Slurm 22.05": {"value": 6.0},
                "gpupool via its CLI": {"value": None, "text": side_by_side.NOT_SUPPORTED},
                "gpupool via its API": {"value": None, "text": side_by_side.NOT_SUPPORTED},
            },
        },
    }
    lines = side_by_side.table(out).splitlines()
    assert lines[2] == "| latency | 927 ms | 820 ms | 89 ms | 0.096× (lower is better) |"
    assert lines[3] == f"| array | 6 ms | {side_by_side.NOT_SUPPORTED} | {side_by_side.NOT_SUPPORTED} | — |"


def test_a_run_without_slurm_has_no_ratio_and_only_the_rows_asked_for() -> None:
    args = side_by_side.parse_args(["--systems", "api", "--workloads", "back_to_back", "--jobs", "50"])
    rows = side_by_side.rows(args)
    assert [row.key for row in rows] == ["back_to_back"]
    out = {
        "systems": ["gpupool via its API"],
        "rows": [row.__dict__ for row in rows],
        "results": {"back_to_back": {"gpupool via its API": {"value": 97.0}}},
    }
    assert (
        side_by_side.table(out).splitlines()[2]
        == "| 50 trivial jobs submitted back to back, end to end | 97 jobs/s | — |"
    )


def test_an_api_job_runs_where_its_stamp_is_written(tmp_path: Path) -> None:
    """A job's own /tmp is private: the stamp directory must be its working directory, bound in."""
    body = side_by_side.job_body("true", tmp_path)
    assert body["workdir"] == str(tmp_path)


def test_burst_shares_the_submissions_and_stops_a_thread_at_its_first_error() -> None:
    calls: list[int] = []

    def ok() -> None:
        calls.append(1)

    def fails() -> None:
        raise RuntimeError("409: no")

    result = burst_mod.burst([ok, ok, ok], 10, max_s=60)
    assert len(result.done) == 10 and len(calls) == 10 and not result.errors
    result = burst_mod.burst([ok, fails], 10, max_s=60)
    assert len(result.done) == 5
    assert result.errors == ["RuntimeError: 409: no"]

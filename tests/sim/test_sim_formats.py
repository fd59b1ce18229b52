"""The public-trace loaders (Microsoft ITP via ElasticFlow, Alibaba openb pod lists, and the
node-gang rule Philly and Tiresias share) on rows copied by hand from the published files, with
the mapped values worked out by hand; and, where the shared traces sit beside this checkout,
every published file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.scheduler.policies import preset
from gpupool.sim.cluster import load_cluster, uniform
from gpupool.sim.engine import simulate
from gpupool.sim.trace import TraceJob, load, node_gang

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
GREEDY = preset("greedy")

ITP_RAW = """job_id,submission_time,duration,num_gpu
965d744f-0445-c1a8-12af-97e4c536c66e,1932025,2429,64
fb10987f-20ac-3703-eb67-146a77a6e17c,2000581,1532,1
9e11d2cd-0930-aef6-8a80-068ddf547e50,2013937,1539,1
8ac8ad93-7e02-921d-f86b-543ae1b243cc,2014133,1602,1
6d39da75-aee7-0ab2-61fa-8e7a078c26ce,2014224,1743,1
"""
ITP_ELASTICFLOW = """job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration
965d744f-0445-c1a8-12af-97e4c536c66e,1932025,45775,resnet50,1933904,256,64,2429
fb10987f-20ac-3703-eb67-146a77a6e17c,2000581,11197,gpt2,2002204,128,1,1532
9e11d2cd-0930-aef6-8a80-068ddf547e50,2013937,7776,vgg16,2015386,64,1,1539
8ac8ad93-7e02-921d-f86b-543ae1b243cc,2014133,6563,gpt2,2016513,256,1,1602
6d39da75-aee7-0ab2-61fa-8e7a078c26ce,2014224,7141,gpt2,2016444,256,1,1743
"""
# (job id, submit - 1932025, duration, workers, GPUs per worker), worked out by hand
ITP_EXPECTED = [
    ("965d744f-0445-c1a8-12af-97e4c536c66e", 0.0, 2429.0, 8, 8.0),  # 64 GPUs: 8 whole 8-GPU nodes
    ("fb10987f-20ac-3703-eb67-146a77a6e17c", 68556.0, 1532.0, 1, 1.0),
    ("9e11d2cd-0930-aef6-8a80-068ddf547e50", 81912.0, 1539.0, 1, 1.0),
    ("8ac8ad93-7e02-921d-f86b-543ae1b243cc", 82108.0, 1602.0, 1, 1.0),
    ("6d39da75-aee7-0ab2-61fa-8e7a078c26ce", 82199.0, 1743.0, 1, 1.0),
]

OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
# The first six rows of openb_pod_list_default.csv, its first 8-GPU pod (0017) and its one pod
# deleted the instant it was created (7285), then two pods of openb_pod_list_gpuspec05.csv
# with a GPU-model constraint (0019, 0099).
OPENB_TIMED = [
    "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0",
    "openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061",
    "openb-pod-0002,12000,24576,1,1000,,LS,Running,1558381,12902960,1558381",
    "openb-pod-0003,6000,12288,1,460,,LS,Running,2690044,12902960,2690044",
    "openb-pod-0004,12000,16384,1,1000,,LS,Running,2758084,12902960,2758084",
    "openb-pod-0005,20000,65536,0,0,,LS,Running,2759674,12902960,2759676",
    "openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497",
    "openb-pod-0019,8000,30517,1,470,T4,LS,Running,9664050,12902960,9664050",
    "openb-pod-0099,3152,5600,1,1000,V100M16|V100M32,BE,Failed,10020698,10020979,10020698",
    "openb-pod-7285,8000,30517,1,230,,BE,Pending,12774042,12774042,",
]
# (name, submit, duration, gpus, CPU millicores, memory MiB, gpu_model), worked out by hand
OPENB_TIMED_EXPECTED = [
    ("openb-pod-0000", 0.0, 12537496.0, 1.0, 12000, 16384, None),
    ("openb-pod-0001", 427061.0, 12475899.0, 0.46, 6000, 12288, None),  # 460 milli: a share of one GPU
    ("openb-pod-0002", 1558381.0, 11344579.0, 1.0, 12000, 24576, None),
    ("openb-pod-0003", 2690044.0, 10212916.0, 0.46, 6000, 12288, None),
    ("openb-pod-0004", 2758084.0, 10144876.0, 1.0, 12000, 16384, None),
    ("openb-pod-0005", 2759674.0, 10143286.0, 0.0, 20000, 65536, None),  # CPU only
    ("openb-pod-0017", 9437497.0, 1332357.0, 8.0, 88000, 327680, None),
    ("openb-pod-0019", 9664050.0, 3238910.0, 0.47, 8000, 30517, "T4"),
    ("openb-pod-0099", 10020698.0, 281.0, 1.0, 3152, 5600, "V100M16|V100M32"),  # 3152 millicores, kept exactly
    ("openb-pod-7285", 12774042.0, 0.0, 0.23, 8000, 30517, None),
]
OPENB_MULTIGPU = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
openb-pod-0000,12000,16384,1,1000
openb-pod-0001,6000,12288,1,460
openb-pod-0002,12000,24576,1,1000
openb-pod-0003,6000,12288,1,460
openb-pod-0004,12000,16384,1,1000
openb-pod-0005,20000,65536,0,0
openb-pod-0017,88000,327680,8,1000
"""

ITP_JOBS = {
    "cluster01": 1595,
    "cluster02": 5778,
    "cluster03": 3011,
    "cluster04": 15802,
    "cluster05": 3629,
    "cluster06": 2396,
    "cluster07": 12699,
    "cluster08": 13047,
    "cluster09": 11134,
    "cluster10": 260,
}
OPENB_PODS = {
    "default": 8152,
    "cpu0": 7064,
    "cpu037": 7336,
    "cpu050": 7439,
    "cpu072": 7608,
    "cpu100": 7853,
    "cpu200": 8832,
    "cpu235": 9240,
    "cpu250": 9420,
    "cpu300": 10094,
    **{f"gpushare{n}": 8152 for n in (20, 40, 60, 80, 100)},
    **{f"gpuspec{n}": 8152 for n in ("05", "10", "20", "25", "33")},
    "multigpu20": 8324,
    "multigpu30": 8508,
    "multigpu40": 8746,
    "multigpu50": 9061,
}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def shared(*parts: str) -> Path:
    path = TRACES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"the shared traces are not beside this checkout ({path})")
    return path


def itp_view(jobs: list[TraceJob]) -> list[tuple[str, float, float | None, int, float]]:
    return [(j.job_id, j.submit_time, j.duration, j.spec.workers, j.spec.gpus) for j in jobs]


@pytest.mark.parametrize(("name", "text"), [("raw.csv", ITP_RAW), ("elasticflow.csv", ITP_ELASTICFLOW)])
def test_itp_rows_map_to_jobs_and_big_ones_to_gangs_of_whole_nodes(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path, name, text)
    for fmt in ("itp", "auto"):
        jobs = load(path, fmt)
        assert itp_view(jobs) == ITP_EXPECTED
        assert {j.spec.project for j in jobs} == {"default"}
        assert [j.spec.name for j in jobs] == [j.job_id for j in jobs]


def test_openb_pods_map_to_one_worker_jobs(tmp_path: Path) -> None:
    path = write(tmp_path, "openb.csv", OPENB_HEADER + "\n" + "\n".join(OPENB_TIMED) + "\n")
    for fmt in ("openb", "auto"):
        jobs = load(path, fmt)
        got = [
            (j.job_id, j.submit_time, j.duration, j.spec.gpus, j.spec.cpu_milli, j.spec.memory_mib, j.spec.gpu_model)
            for j in jobs
        ]
        assert got == OPENB_TIMED_EXPECTED
        assert all(j.spec.workers == 1 and j.spec.project == "default" for j in jobs)


def test_openb_multigpu_lists_arrive_one_a_second_and_never_end(tmp_path: Path) -> None:
    jobs = load(write(tmp_path, "multigpu.csv", OPENB_MULTIGPU))
    assert [(j.job_id, j.submit_time, j.duration, j.spec.gpus) for j in jobs] == [
        ("openb-pod-0000", 0.0, None, 1.0),
        ("openb-pod-0001", 1.0, None, 0.46),
        ("openb-pod-0002", 2.0, None, 1.0),
        ("openb-pod-0003", 3.0, None, 0.46),
        ("openb-pod-0004", 4.0, None, 1.0),
        ("openb-pod-0005", 5.0, None, 0.0),
        ("openb-pod-0017", 6.0, None, 8.0),
    ]


def test_two_openb_shares_run_on_one_gpu_together(tmp_path: Path) -> None:
    """0000 takes one node's whole GPU; 0001 and 0003 (0.46 each) then share the other node's
    GPU: all three start on arrival, though there are only two GPUs."""
    rows = [OPENB_TIMED[0], OPENB_TIMED[1], OPENB_TIMED[3]]
    jobs = load(write(tmp_path, "openb.csv", OPENB_HEADER + "\n" + "\n".join(rows) + "\n"))
    result = simulate(jobs, uniform(2, 1), (), GREEDY)
    assert [(r.trace.job_id, r.first_start) for r in result.runs.values()] == [
        ("openb-pod-0000", 0.0),
        ("openb-pod-0001", 427061.0),
        ("openb-pod-0003", 2690044.0),
    ]
    assert max(held for _, held, _ in result.timeline) == pytest.approx(1.92)


@pytest.mark.parametrize(
    ("gpus", "gang"),
    [(0, (1, 0)), (1, (1, 1)), (8, (1, 8)), (12, (2, 6)), (16, (2, 8)), (20, (4, 5)), (24, (3, 8)), (64, (8, 8))],
)
def test_node_gang_keeps_the_gpu_total_in_the_fewest_workers_that_fit_a_node(gpus: int, gang: tuple[int, int]) -> None:
    assert node_gang(gpus) == gang


def test_philly_twelve_gpu_jobs_keep_all_twelve(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,100,12,1200,6214e9\n"
        "2017-10-01 00:01:00,10,64,640,6214e9\n",
    )
    assert [(j.spec.workers, j.spec.gpus) for j in load(path)] == [(2, 6.0), (8, 8.0)]


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        ("itp", ITP_RAW.replace(",1532,", ",x,"), r"bad\.csv:3: not an ITP job row: could not convert string to float"),
        ("itp", ITP_RAW.replace(",1532,", ",-5,"), r"bad\.csv:3: not an ITP job row: duration must be >= 0 seconds"),
        ("itp", ITP_RAW.replace(",1602,1", ",1602"), r"bad\.csv:5: not an ITP job row: too few fields"),
        ("itp", ITP_RAW.replace("num_gpu", "gpus"), r"bad\.csv:2: not an ITP job row: no column 'num_gpu'"),
        ("itp", ITP_RAW.replace(",1532,1", ",1532,1.5"), r"bad\.csv:3: not an ITP job row: invalid literal"),
        (
            "openb",
            OPENB_HEADER + "\n" + OPENB_TIMED[0] + "\n" + OPENB_TIMED[1].replace(",12902960,", ",5,"),
            r"bad\.csv:3: not an openb pod row: duration must be >= 0 seconds",
        ),
        (
            "openb",
            OPENB_MULTIGPU.replace("6000,12288,1,460", "6000,12288,1,0.5"),
            r"bad\.csv:3: not an openb pod row: invalid literal",
        ),
        (
            "openb",
            OPENB_MULTIGPU.replace("12000,16384,1,1000", "12000,16384,-1,1000", 1),
            r"bad\.csv:2: not an openb pod row: gpus must not be negative",
        ),
    ],
)
def test_a_bad_row_is_one_line_naming_the_file_and_line(tmp_path: Path, fmt: str, text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as caught:
        load(write(tmp_path, "bad.csv", text), fmt)
    assert "\n" not in str(caught.value)


def test_unknown_format_lists_the_formats(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="use one of auto, gpupool, philly, tiresias, itp, openb"):
        load(write(tmp_path, "t.csv", ITP_RAW), "pai")


def test_every_itp_cluster_loads() -> None:
    for cluster, count in ITP_JOBS.items():
        jobs = load(shared("itp_elasticflow", "raw", f"{cluster}.csv"))
        assert len(jobs) == count, cluster
        assert jobs[0].submit_time == 0 and all(j.duration is not None for j in jobs)
        assert all(j.spec.gpus <= 8 and j.spec.total_gpus in (1, 2, 4, 8, 16, 32, 64) for j in jobs)


def test_every_openb_pod_list_loads() -> None:
    for variant, count in OPENB_PODS.items():
        jobs = load(shared("alibaba_gpu_v2023", f"openb_pod_list_{variant}.csv"))
        assert len(jobs) == count, variant
        assert all(j.duration is None for j in jobs) == variant.startswith("multigpu"), variant
    default = load(shared("alibaba_gpu_v2023", "openb_pod_list_default.csv"))
    assert sum(1 for j in default if 0 < j.spec.gpus < 1) == 3078  # the README's GPU-sharing pods
    assert sum(1 for j in default if j.spec.gpus == 0) == 1088


def test_an_openb_slice_runs_on_the_openb_gpu_nodes() -> None:
    pods = load(shared("alibaba_gpu_v2023", "openb_pod_list_default.csv"))[:200]
    nodes = load_cluster(shared("alibaba_gpu_v2023", "openb_node_list_gpu_node.csv"))
    result = simulate(pods, nodes, (), GREEDY)
    assert sum(1 for p in pods if 0 < p.spec.gpus < 1) == 64
    # 6,212 GPUs for 200 pods: each starts on arrival, and held GPUs count fractions as such
    assert all(r.first_start == r.trace.submit_time for r in result.runs.values())
    assert all(r.finish is not None for r in result.runs.values())
    assert any(held % 1 for _, held, _ in result.timeline)

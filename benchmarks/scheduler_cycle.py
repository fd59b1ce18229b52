"""Scheduler cycle time: ``schedule(snapshot, config)`` on large synthetic clusters, in-process.

No head, no store, no HTTP: the benchmark builds a frozen ``Snapshot`` and times the pure
function the controller calls once per cycle. Cases (nodes x 8 GPUs, 64 CPUs, 512 GiB each):

* small: 100 nodes, 500 running jobs, 1,000 pending
* scale: 1,000 nodes, 5,000 running jobs, 10,000 pending (the figure from the issue)
* big: 10,000 nodes, 50,000 running, 100,000 pending (only with --big; can take very long)
* --tree (issue 34): the scale case's jobs over 176 projects under 20 labs under 4 faculties
  (200 projects in 3 levels, each unit limited to 4x its quota), timed beside the same 176
  projects flat; the tree's cycle should be at most 1.5x the flat one's

Running jobs are placed consistently (no GPU or CPU core used twice, shares of one GPU add up
to at most 1): mostly 1-GPU jobs, some 2/4/8-GPU, a few 2-worker gangs of 8, some 0.5-GPU
shares, about 92 % of the GPUs busy. Pending jobs are drawn from the Philly trace's rows
(num_gpus; a job over 8 GPUs becomes a gang of 8-GPU workers); some 1-GPU jobs are turned into
0.25/0.5 shares; priorities are mostly train (4 % interactive, 2 % inference); projects are
spread over 10 names (Zipf-like). 40 % of all jobs give a --max-runtime of 1.5x a trace
duration, in whole hours (what backfill and reservations read). The queue is much larger than
the free capacity, so most pending jobs do not fit: each is tried against the nodes and
explained, which is the hard case.

Where the scheduler has projects, the 10 projects get quotas (60 % of the GPUs, Zipf-like; the
``default`` project gets none) and the running jobs are spread over them in proportion to their
fair share (quota + an equal part of the rest): the steady state, where reclaim finds little to
do and only the random spread leaves a few projects a little below their quota. Some running
1-2 GPU jobs are interactive or inference.

For each case it prints the sizes, the jobs the cycle starts, the cycle time (median and min
over --repeats runs of ``schedule()`` alone; building the snapshot is not timed) and a split of
one extra run: timers are wrapped around Session.open, each action, Session.try_place_gang
(placed vs failed jobs) and explain() for that run only (a step the scheduler no longer has
is listed as not measured). --profile adds a cProfile run: the top functions by cumulative
time and the own time spent in each scheduler file.

Beside the cold figure it prints a steady-state one (``_steady.py``): the head's cycle after the
first, with the ``CycleMemory`` carried over and each snapshot a few jobs different from the last
(--changes ended and arrived per cycle), read afresh as new objects as the head reads them;
median of --steady-cycles after --warmup untimed ones, and a cold cycle on the last snapshot,
whose result must equal the steady one. --sweep does the same at 100, 1,000 and 10,000 nodes
(5 running and 10 pending jobs a node) and prints the cost per node.

    .venv/bin/python benchmarks/scheduler_cycle.py [--repeats 5] [--seed 1] [--big] [--profile] [--json]
        [--steady-cycles 7] [--warmup 3] [--changes 5] [--no-steady] [--sweep] [--sweep-nodes 100,1000,10000]
        [--placement binpack] [--tree]
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import dataclasses
import gc
import io
import json
import math
import pstats
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _head import machine, machine_line
from _steady import run_steady, summary

from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.domain.resources import GPU_FRACTION_STEPS, fraction_steps
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import schedule
from gpupool.scheduler.policies import preset

TRACE = Path("/work/shared/traces/philly/philly_pollux_jobs.csv")
# num_gpus histogram of that trace (82,247 jobs), used when the file is not there.
TRACE_FALLBACK = {1: 76627, 2: 1818, 4: 1870, 8: 1643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}

GPUS_PER_NODE = 8
NODE_CPUS = 64
NODE_MEMORY_MIB = 512 * 1024
GPU_MODEL = "H100-80GB"

# name: (nodes, running jobs, pending jobs)
CASES: dict[str, tuple[int, int, int]] = {
    "small": (100, 500, 1_000),
    "scale": (1_000, 5_000, 10_000),
    "big": (10_000, 50_000, 100_000),
}

# Running jobs: ((gpus per worker, workers), weight). Mean 1.48 GPUs a job: about 92 % busy.
RUNNING_MIX: list[tuple[tuple[float, int], float]] = [
    ((1.0, 1), 0.74),
    ((0.5, 1), 0.08),
    ((2.0, 1), 0.09),
    ((4.0, 1), 0.06),
    ((8.0, 1), 0.025),
    ((8.0, 2), 0.005),
]
FRACTIONAL_SHARE = 0.10  # of pending 1-GPU jobs, turned into 0.25 or 0.5 of a GPU
PRIORITIES = (("train", 94), ("interactive", 4), ("inference", 2))  # for 1-2 GPU single-worker jobs
PROJECTS = ("vision", "nlp", "speech", "rl", "recsys", "llm-pretrain", "llm-finetune", "infra", "research", "eval")
PROJECT_WEIGHTS = [1 / (k + 1) for k in range(len(PROJECTS))]  # Zipf-like: a few big projects
QUOTA_PART = 0.6  # of all GPUs, split over the projects as quotas in PROJECT_WEIGHTS proportions
RUNNING_PRIORITIES = (("train", 92), ("interactive", 5), ("inference", 3))  # for 1-2 GPU jobs
MAX_RUNTIME_SHARE = 0.4  # of jobs that give --max-runtime (what backfill and reservations use)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------------------------
# Building the snapshot


@dataclass
class Trace:
    """Jobs of the trace as (GPUs, duration in s or None); sampled with replacement."""

    jobs: list[tuple[int, float | None]]
    source: str

    def durations(self) -> list[float]:
        return [d for _, d in self.jobs if d is not None and d > 0]


def load_trace(path: Path) -> Trace:
    jobs: list[tuple[int, float | None]] = []
    try:
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                gpus = int(float(row["num_gpus"]))
                duration = float(row["duration"]) if row.get("duration") else None
                if gpus > 0:
                    jobs.append((gpus, duration))
    except (OSError, KeyError, ValueError):
        jobs = [(gpus, None) for gpus, n in TRACE_FALLBACK.items() for _ in range(n)]
        return Trace(jobs, f"built-in num_gpus histogram of {path.name} (file not readable; no durations)")
    return Trace(jobs, f"{path} ({len(jobs)} jobs)")


def max_runtime(duration: float | None, rng: random.Random) -> int | None:
    """Some users give --max-runtime: the job's trace duration with head room, in whole hours."""
    if duration is None or duration <= 0 or rng.random() >= MAX_RUNTIME_SHARE:
        return None
    return 3600 * max(1, math.ceil(duration * 1.5 / 3600))


def worker_resources(gpus: float, rng: random.Random) -> tuple[int, int]:
    """(cpus, memory MiB) of one worker: 4-8 cores and 32-64 GiB per GPU, a whole 8-GPU node at most."""
    cpus_per_gpu = rng.choice((4, 6, 8))
    gib_per_gpu = rng.choice((32, 48, 64))
    if gpus < 1:
        return max(1, int(cpus_per_gpu * gpus)), int(gib_per_gpu * gpus * 1024)
    return int(cpus_per_gpu * gpus), int(gib_per_gpu * gpus) * 1024


def make_nodes(count: int) -> list[Node]:
    nodes = []
    for i in range(count):
        name = f"gpu-{i:05d}"
        gpus = tuple(GpuInfo(g, f"GPU-{i:05d}-{g}", GPU_MODEL, 81559, False) for g in range(GPUS_PER_NODE))
        address = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
        nodes.append(Node(name, NodeState.UP, address, gpus, NODE_CPUS, NODE_MEMORY_MIB, {"zone": f"z{i % 4}"}))
    return nodes


@dataclass(slots=True)
class _Fill:
    """Builder-side free resources of one node (independent of the scheduler's own)."""

    name: str
    gpus: list[int]
    cpus: list[int]
    memory: int
    shared: dict[int, int] = field(default_factory=dict)  # gpu -> thousandths taken

    def fits(self, gpus: float, cpus: int, memory: int) -> bool:
        if cpus > len(self.cpus) or memory > self.memory:
            return False
        if gpus < 1:
            steps = fraction_steps(gpus)
            return bool(self.gpus) or any(u + steps <= GPU_FRACTION_STEPS for u in self.shared.values())
        return len(self.gpus) >= gpus

    def take(self, worker: int, gpus: float, cpus: int, memory: int) -> Placement:
        share = 0.0
        if gpus < 1:
            steps = fraction_steps(gpus)
            open_gpus = [g for g, u in self.shared.items() if u + steps <= GPU_FRACTION_STEPS]
            index = open_gpus[0] if open_gpus else self.gpus.pop(0)
            self.shared[index] = self.shared.get(index, 0) + steps
            taken: tuple[int, ...] = (index,)
            share = gpus
        else:
            taken = tuple(self.gpus[: int(gpus)])
            del self.gpus[: int(gpus)]
        cores = tuple(self.cpus[:cpus])
        del self.cpus[:cpus]
        self.memory -= memory
        return Placement(worker=worker, node=self.name, gpus=taken, gpu_share=share, cpus=cores, memory_mib=memory)


def _find_node(fills: list[_Fill], gpus: float, cpus: int, memory: int, rng: random.Random) -> _Fill | None:
    """A random node that fits (a few random tries, then a scan from a random start)."""
    for _ in range(24):
        fill = fills[rng.randrange(len(fills))]
        if fill.fits(gpus, cpus, memory):
            return fill
    start = rng.randrange(len(fills))
    for k in range(len(fills)):
        fill = fills[(start + k) % len(fills)]
        if fill.fits(gpus, cpus, memory):
            return fill
    return None


def quotas(capacity: int) -> list[float]:
    scale = QUOTA_PART * capacity / sum(PROJECT_WEIGHTS)
    return [float(round(w * scale)) for w in PROJECT_WEIGHTS]


def fair_share_weights(capacity: int) -> list[float]:
    """Quota plus an equal part of the GPUs no quota covers (``default`` has a part too)."""
    rest = capacity - sum(quotas(capacity))
    return [q + rest / (len(PROJECTS) + 1) for q in quotas(capacity)]


def make_running(
    nodes: Sequence[Node], count: int, durations: list[float], rng: random.Random
) -> tuple[list[RunningJob], int]:
    """``count`` running jobs placed at random over the nodes, largest first; (jobs, not placed).

    Projects are drawn in proportion to their fair share (the steady state of a full cluster).
    A job with a --max-runtime (from a trace duration) started less than that long ago.
    """
    share_weights = fair_share_weights(sum(len(n.gpus) for n in nodes))
    fills = [_Fill(n.name, list(range(len(n.gpus))), list(range(n.cpus)), n.memory_mib) for n in nodes]
    shapes = rng.choices([s for s, _ in RUNNING_MIX], weights=[w for _, w in RUNNING_MIX], k=count)
    shapes.sort(key=lambda s: s[0] * s[1], reverse=True)
    jobs: list[RunningJob] = []
    dropped = 0
    for job_id, (gpus, workers) in enumerate(shapes, start=1):
        cpus, memory = worker_resources(gpus, rng)
        placements = []
        for worker in range(workers):
            fill = _find_node(fills, gpus, cpus, memory, rng)
            if fill is None:
                break
            placements.append(fill.take(worker, gpus, cpus, memory))
        if len(placements) < workers:  # cannot happen below ~100 % fill; undo is not needed for a benchmark
            dropped += 1
            continue
        priority = "train"
        if workers == 1 and gpus <= 2:
            priority = rng.choices([p for p, _ in RUNNING_PRIORITIES], weights=[w for _, w in RUNNING_PRIORITIES])[0]
        limit = max_runtime(rng.choice(durations), rng) if durations else None
        spec = JobSpec.create(
            command=["python", "train.py"],
            project=rng.choices(PROJECTS, weights=share_weights)[0],
            gpus=gpus,
            workers=workers,
            cpus=cpus,
            memory=memory,
            priority=priority,
            max_runtime_s=limit,
        )
        started = T0 - timedelta(seconds=rng.uniform(60, min(3 * 86400, limit or 3 * 86400)))
        jobs.append(RunningJob(job_id, spec, tuple(placements), started))
    return jobs, dropped


def make_pending(count: int, first_id: int, trace: Trace, rng: random.Random) -> list[PendingJob]:
    jobs = []
    for offset in range(count):
        total, duration = rng.choice(trace.jobs)
        if total > GPUS_PER_NODE:
            gpus, workers = float(GPUS_PER_NODE), math.ceil(total / GPUS_PER_NODE)
        else:
            gpus, workers = float(total), 1
        if total == 1 and rng.random() < FRACTIONAL_SHARE:
            gpus = rng.choice((0.25, 0.5))
        priority = "train"
        if workers == 1 and gpus <= 2:
            priority = rng.choices([p for p, _ in PRIORITIES], weights=[w for _, w in PRIORITIES])[0]
        cpus, memory = worker_resources(gpus, rng)
        spec = JobSpec.create(
            command=["python", "train.py", "--config", f"exp{offset % 97}.yaml"],
            project=rng.choices(PROJECTS, weights=PROJECT_WEIGHTS)[0],
            gpus=gpus,
            workers=workers,
            cpus=cpus,
            memory=memory,
            priority=priority,
            max_runtime_s=max_runtime(duration, rng),
        )
        submitted = T0 - timedelta(seconds=rng.uniform(0, 2 * 86400))
        jobs.append(PendingJob(first_id + offset, spec, submitted))
    return jobs


@dataclass
class Built:
    snapshot: Snapshot
    not_placed: int
    build_s: float


def build_snapshot(nodes: int, running: int, pending: int, seed: int, trace: Trace) -> Built:
    rng = random.Random(f"{seed}:{nodes}:{running}:{pending}")
    t0 = time.perf_counter()
    node_list = make_nodes(nodes)
    running_jobs, dropped = make_running(node_list, running, trace.durations(), rng)
    pending_jobs = make_pending(pending, running + 1, trace, rng)
    projects = make_projects(len(node_list) * GPUS_PER_NODE)
    extra = {"projects": projects} if projects else {}
    snapshot = Snapshot(T0, tuple(node_list), tuple(running_jobs), tuple(pending_jobs), **extra)
    check_consistent(snapshot)
    return Built(snapshot, dropped, time.perf_counter() - t0)


def check_consistent(snapshot: Snapshot) -> None:
    """Fail loudly if the built running set uses a GPU or core twice or over-shares a GPU."""
    whole: set[tuple[str, int]] = set()
    shares: Counter[tuple[str, int]] = Counter()
    cores: set[tuple[str, int]] = set()
    for job in snapshot.running:
        for p in job.placements:
            for g in p.gpus:
                if p.gpu_share:
                    shares[(p.node, g)] += fraction_steps(p.gpu_share)
                elif (p.node, g) in whole:
                    raise AssertionError(f"GPU {g} of {p.node} placed twice")
                else:
                    whole.add((p.node, g))
            for c in p.cpus:
                if (p.node, c) in cores:
                    raise AssertionError(f"core {c} of {p.node} placed twice")
                cores.add((p.node, c))
    for key, steps in shares.items():
        if key in whole or steps > GPU_FRACTION_STEPS:
            raise AssertionError(f"GPU {key} over-shared")


def make_projects(capacity: int) -> tuple[Any, ...]:
    """Quotas for the 10 projects and none for ``default``, where the scheduler has projects.

    Without quotas interactive and inference jobs would all be refused before any fit check, and
    an unconfigured ``default`` is guaranteed the whole cluster. () on a scheduler without projects.
    """
    if "projects" not in {f.name for f in dataclasses.fields(Snapshot)}:
        return ()
    try:
        from gpupool.domain.projects import Project
    except ImportError:
        return ()
    configured = [Project(name, quota=q) for name, q in zip(PROJECTS, quotas(capacity), strict=True)]
    return (Project("default", quota=0.0), *configured)


# --------------------------------------------------------------------------------------------
# A tree of projects (issue 34): the scale case's jobs under 200 projects in 3 levels

TREE_FACULTIES = 4
TREE_LABS = 5  # per faculty
TREE_LEAVES = 176  # over the 20 labs (8 or 9 each): 4 + 20 + 176 = 200 projects
TREE_LIMIT = 4.0  # each unit's limit, times its quota: checked for every job, binding for the busiest


def tree_projects(capacity: int) -> tuple[list[Any], list[str]]:
    """4 faculties over 5 labs each over 8-9 projects: 60 % of the GPUs as quotas, split level by
    level (each level's children within their unit's), each unit limited to TREE_LIMIT times its
    quota so the unit-limit check runs for every job; and the leaves' names."""
    from gpupool.domain.projects import Project

    faculty_quota = math.floor(QUOTA_PART * capacity / TREE_FACULTIES)
    lab_quota = faculty_quota // TREE_LABS
    labs = [f"lab-{f}-{i}" for f in range(TREE_FACULTIES) for i in range(TREE_LABS)]
    faculty_limit, lab_limit = TREE_LIMIT * faculty_quota, TREE_LIMIT * lab_quota
    projects = [Project(f"faculty-{f}", float(faculty_quota), faculty_limit) for f in range(TREE_FACULTIES)]
    projects += [Project(lab, float(lab_quota), lab_limit, parent=f"faculty-{lab.split('-')[1]}") for lab in labs]
    leaves = []
    for k in range(TREE_LEAVES):
        lab = labs[k % len(labs)]
        per_lab = math.ceil(TREE_LEAVES / len(labs))
        leaves.append(Project(f"p{k:03d}", float(lab_quota // per_lab), parent=lab))
    return [Project("default", quota=0.0), *projects, *leaves], [p.name for p in leaves]


def tree_snapshots(snap: Snapshot, seed: int) -> tuple[Snapshot, Snapshot]:
    """The same jobs spread over the 176 leaf projects (each of the 10 names' jobs over its own
    slice of leaves): flat (the leaves alone, no parent) and in the tree."""
    projects, leaves = tree_projects(sum(len(n.gpus) for n in snap.nodes))
    rng = random.Random(f"{seed}:tree")
    slices = {name: leaves[i :: len(PROJECTS)] for i, name in enumerate(PROJECTS)}

    def move(spec: JobSpec) -> JobSpec:
        return dataclasses.replace(spec, project=rng.choice(slices.get(spec.project, leaves)))

    running = tuple(dataclasses.replace(j, spec=move(j.spec)) for j in snap.running)
    pending = tuple(dataclasses.replace(j, spec=move(j.spec)) for j in snap.pending)
    flat = tuple(dataclasses.replace(p, parent=None) for p in projects if p.name == "default" or p.name in leaves)
    base = dataclasses.replace(snap, running=running, pending=pending)
    return dataclasses.replace(base, projects=flat), dataclasses.replace(base, projects=tuple(projects))


def run_tree(args: argparse.Namespace, trace: Trace) -> dict[str, Any]:
    """The scale case (1,000 nodes x 8 GPUs) under 200 projects in 3 levels beside the same 176
    leaf projects flat: cycle time of each (median of --repeats) and their ratio (target <= 1.5)."""
    nodes, running, pending = CASES["scale"]
    built = build_snapshot(nodes, running, pending, args.seed, trace)
    config = preset(args.policy, placement=args.placement)
    out: dict[str, Any] = {"nodes": nodes, "running": running, "pending": pending, "projects": {}}
    for label, snap in zip(("flat", "tree"), tree_snapshots(built.snapshot, args.seed), strict=True):
        times, result = time_cycles(snap, config, args.repeats)
        out[label] = {
            "projects": len(snap.projects),
            "median_s": statistics.median(times),
            "min_s": min(times),
            "started": len(result.starts),
            "preemptions": len(result.preemptions),
            "reasons": dict(Counter(str(r.code) for r in result.pending.values()).most_common()),
        }
    out["ratio"] = out["tree"]["median_s"] / out["flat"]["median_s"]
    return out


def print_tree(tree: dict[str, Any]) -> None:
    print(f"\n== tree: {tree['nodes']:,} nodes x 8 GPUs, {tree['running']:,} running, {tree['pending']:,} pending ==")
    for label in ("flat", "tree"):
        row = tree[label]
        print(
            f"  {label}: {row['projects']} projects, schedule() median {_ms(row['median_s'])}, min {_ms(row['min_s'])};"
            f" starts {row['started']:,}, preempts {row['preemptions']:,}: {row['reasons']}"
        )
    verdict = "within" if tree["ratio"] <= 1.5 else "OVER"
    print(f"  tree / flat: {tree['ratio']:.2f}x ({verdict} the 1.5x target)")


# --------------------------------------------------------------------------------------------
# Measuring


def busy_gpus(snapshot: Snapshot) -> int:
    """GPUs with any work on them (a shared GPU counts once)."""
    used = {(p.node, g) for job in snapshot.running for p in job.placements for g in p.gpus}
    return len(used)


def pending_shapes(snapshot: Snapshot) -> int:
    return len({(s.gpus, s.workers, s.cpus, s.memory_mib, s.gpu_model) for s in (j.spec for j in snapshot.pending)})


def time_cycles(snapshot: Snapshot, config: SchedulerConfig, repeats: int) -> tuple[list[float], Any]:
    times = []
    result = None
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        result = schedule(snapshot, config)
        times.append(time.perf_counter() - t0)
    return times, result


def phase_split(snapshot: Snapshot, config: SchedulerConfig, expected: Any) -> dict[str, Any]:
    """One more ``schedule()`` run with timers wrapped around its steps.

    Wraps ``Session.open``, each entry of ``cycle.ACTIONS``, ``Session.try_place_gang`` (split by
    outcome) and ``cycle.explain`` for the duration of the run, then puts them back. A step whose
    name no longer exists in the scheduler is left out and listed under "missing".
    """
    from gpupool.scheduler import cycle

    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()

    def timed(fn: Callable[..., Any], key: str, outcome: Callable[[Any], str] | None = None) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            k = key if outcome is None else f"{key}, {outcome(result)}"
            spent[k] += time.perf_counter() - t0
            calls[k] += 1
            return result

        return wrapper

    undo: list[Callable[[], None]] = []
    missing: list[str] = []

    def patch(owner: Any, attr: str, make: Callable[[Any], Any]) -> None:
        if attr not in vars(owner):
            missing.append(f"{getattr(owner, '__name__', owner)}.{attr}")
            return
        original = vars(owner)[attr]
        setattr(owner, attr, make(getattr(owner, attr)))
        undo.append(lambda: setattr(owner, attr, original))

    session_cls = getattr(cycle, "Session", None)
    try:
        if session_cls is not None:
            patch(session_cls, "open", lambda bound: staticmethod(timed(bound, "Session.open")))
            patch(
                session_cls,
                "try_place_gang",
                lambda fn: timed(fn, "try_place_gang", lambda r: "failed" if r is None else "placed"),
            )
        else:
            missing.append("cycle.Session")
        patch(cycle, "explain", lambda fn: timed(fn, "explain(job, cluster)"))
        actions = getattr(cycle, "ACTIONS", None)
        if isinstance(actions, dict):
            saved = dict(actions)
            for name, fn in saved.items():
                actions[name] = timed(fn, f"action {name}")
            undo.append(lambda: (actions.clear(), actions.update(saved)))
        else:
            missing.append("cycle.ACTIONS")
        gc.collect()
        t0 = time.perf_counter()
        result = schedule(snapshot, config)
        total = time.perf_counter() - t0
    finally:
        for restore in reversed(undo):
            restore()
    phases = {k: {"s": spent[k], "calls": calls[k]} for k in spent}
    top = sum(v["s"] for k, v in phases.items() if k == "Session.open" or k.startswith("action "))
    top += spent.get("explain(job, cluster)", 0.0)
    phases["rest of schedule()"] = {"s": max(0.0, total - top), "calls": 1}
    sub: dict[str, float] = {}
    try:
        from gpupool.scheduler.cluster import ClusterState

        t1 = time.perf_counter()
        ClusterState(snapshot)
        sub["ClusterState(snapshot) alone"] = time.perf_counter() - t1
    except Exception as exc:  # internals changed: the sub-timing is a nicety
        sub[f"ClusterState(snapshot): {type(exc).__name__}"] = 0.0
    same = len(result.starts) == len(expected.starts) and dict(result.pending) == dict(expected.pending)
    return {"total_s": total, "phases": phases, "sub_s": sub, "missing": missing, "matches_schedule": same}


def profile_cycle(snapshot: Snapshot, config: SchedulerConfig, top: int) -> dict[str, Any]:
    gc.collect()
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.runcall(schedule, snapshot, config)
    wall = time.perf_counter() - t0
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    by_file: Counter[str] = Counter()
    total_tt = 0.0
    for (filename, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():
        short = _short_path(filename)
        rows.append(
            {"function": f"{short}:{line}({func})", "ncalls": ncalls, "tottime_s": tottime, "cumtime_s": cumtime}
        )
        by_file[short if "gpupool" in filename else "(stdlib/builtins)"] += tottime
        total_tt += tottime
    rows.sort(key=lambda r: r["cumtime_s"], reverse=True)
    files = [{"file": f, "tottime_s": t, "share": t / total_tt if total_tt else 0.0} for f, t in by_file.most_common()]
    return {"wall_s_with_profiler": wall, "top_cumulative": rows[:top], "tottime_by_file": files}


def _short_path(filename: str) -> str:
    marker = "/gpupool/"
    if marker in filename:
        return "gpupool/" + filename.split(marker, 1)[1]
    return filename


# --------------------------------------------------------------------------------------------
# Running the cases


def run_case(name: str, args: argparse.Namespace, trace: Trace) -> dict[str, Any]:
    nodes, running, pending = CASES[name]
    built = build_snapshot(nodes, running, pending, args.seed, trace)
    snap = built.snapshot
    config = preset(args.policy, placement=args.placement)
    repeats = args.big_repeats if name == "big" else args.repeats
    times, result = time_cycles(snap, config, repeats)
    gpus = sum(len(n.gpus) for n in snap.nodes)
    busy = busy_gpus(snap)
    out: dict[str, Any] = {
        "case": name,
        "nodes": nodes,
        "gpus": gpus,
        "busy_gpus_before": busy,
        "running": len(snap.running),
        "running_not_placed": built.not_placed,
        "pending": len(snap.pending),
        "pending_gpus": sum(j.spec.total_gpus for j in snap.pending),
        "pending_shapes": pending_shapes(snap),
        "started": len(result.starts),
        "started_gpus": sum(p.gpu_share or len(p.gpus) for s in result.starts for p in s.placements),
        "still_pending": len(result.pending),
        "reasons": dict(Counter(str(r.code) for r in result.pending.values()).most_common()),
        "repeats": repeats,
        "cycle_s": {"median": statistics.median(times), "min": min(times), "max": max(times), "all": times},
        "build_s": built.build_s,
        "changes": args.changes,
    }
    if not args.no_steady and name != "big":
        out["steady"] = steady_case(snap, config, args, trace, fresh=True)
    if args.no_split or (name == "big" and not args.big_split):
        out["split_skipped"] = True
    else:
        out["split"] = phase_split(snap, config, result)
    if args.profile:
        out["profile"] = profile_cycle(snap, config, args.top)
    return out


def steady_case(snap: Snapshot, config: SchedulerConfig, args: argparse.Namespace, trace: Trace, *, fresh: bool) -> Any:
    rng = random.Random(f"{args.seed}:arrivals")
    return summary(
        run_steady(
            snap,
            config,
            lambda count, first: make_pending(count, first, trace, rng),
            warmup=args.warmup,
            cycles=args.steady_cycles,
            changes=args.changes,
            fresh=fresh,
            seed=args.seed,
        )
    )


def run_sweep(args: argparse.Namespace, trace: Trace) -> list[dict[str, Any]]:
    """Steady and cold cycles at 100, 1,000 and 10,000 nodes, 5 running and 10 pending jobs a node."""
    rows = []
    for nodes in args.sweep_nodes:
        built = build_snapshot(nodes, 5 * nodes, 10 * nodes, args.seed, trace)
        steady = steady_case(built.snapshot, preset(args.policy, placement=args.placement), args, trace, fresh=True)
        rows.append({"nodes": nodes, "running": 5 * nodes, "pending": 10 * nodes, **steady})
        if not args.json:
            s, c = steady["steady_s"]["median"], steady["cold_s"]["median"]
            print(
                f"  {nodes:>6,} nodes, {5 * nodes:>6,} running, {10 * nodes:>7,} pending: steady {_ms(s):>10s} "
                f"({s / nodes * 1e6:,.1f} us/node), cold {_ms(c):>10s} ({c / nodes * 1e6:,.1f} us/node)"
                + ("" if steady["same_as_cold"] else "  [WARNING: steady result differs from cold]")
            )
            sys.stdout.flush()
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def print_case(case: dict[str, Any]) -> None:
    c = case["cycle_s"]
    print(f"\n== {case['case']}: {case['nodes']:,} nodes, {case['gpus']:,} GPUs ==")
    print(
        f"running {case['running']:,} jobs on {case['busy_gpus_before']:,} GPUs "
        f"({case['busy_gpus_before'] / case['gpus']:.1%} busy)"
        + (f", {case['running_not_placed']} could not be placed" if case["running_not_placed"] else "")
    )
    print(
        f"pending {case['pending']:,} jobs ({case['pending_gpus']:,.0f} GPUs asked, "
        f"{case['pending_shapes']} distinct shapes)"
    )
    print(
        f"cycle starts {case['started']:,} jobs ({case['started_gpus']:,.2f} GPUs), "
        f"leaves {case['still_pending']:,} pending: {case['reasons']}"
    )
    print(
        f"schedule(): median {_ms(c['median'])}, min {_ms(c['min'])}, max {_ms(c['max'])} "
        f"over {case['repeats']} runs (snapshot built in {case['build_s']:.2f} s, not timed)"
    )
    steady = case.get("steady")
    if steady is not None:
        st = steady["steady_s"]
        print(
            f"steady state (carried CycleMemory, head-like fresh snapshot objects, {len(st['all'])} cycles of "
            f"{case['changes']} jobs ended + {case['changes']} arrived): median {_ms(st['median'])}, "
            f"min {_ms(st['min'])}; cold on the same snapshot {_ms(steady['cold_s']['median'])}; "
            f"starts/cycle {steady['starts_per_cycle']}, preemptions/cycle {steady['preemptions_per_cycle']}"
            + ("" if steady["same_as_cold"] else "  [WARNING: steady result differs from cold]")
        )
    split = case.get("split")
    if case.get("split_skipped"):
        print("split: skipped (--no-split, or the big case without --big-split)")
    if split is not None:
        total = split["total_s"]
        match = "" if split["matches_schedule"] else "  [WARNING: result differs from the timed runs]"
        print(f"split of one more run with timers on its steps ({_ms(total)} in all){match}:")
        order = ["Session.open", *(k for k in split["phases"] if k.startswith("action "))]  # in call order
        order += ["try_place_gang, placed", "try_place_gang, failed", "explain(job, cluster)", "rest of schedule()"]
        for key in order:
            item = split["phases"].get(key)
            if item is None:
                continue
            indent = "    " if key.startswith("try_place_gang") else "  "
            per = f"  ({item['s'] / item['calls'] * 1e6:,.0f} us x {item['calls']:,})" if item["calls"] > 1 else ""
            print(f"{indent}{key:{34 - len(indent)}s} {_ms(item['s']):>12s} {item['s'] / total:6.1%}{per}")
        for key, secs in split["sub_s"].items():
            print(f"  ({key}: {_ms(secs)})")
        if split["missing"]:
            print(f"  not measured (no longer in the scheduler): {', '.join(split['missing'])}")
    prof = case.get("profile")
    if prof is not None:
        print(f"cProfile of one run ({prof['wall_s_with_profiler']:.2f} s with the profiler on), top by cumulative:")
        print(f"  {'ncalls':>10s} {'tottime':>9s} {'cumtime':>9s}  function")
        for row in prof["top_cumulative"]:
            print(f"  {row['ncalls']:>10,} {row['tottime_s']:9.3f} {row['cumtime_s']:9.3f}  {row['function']}")
        print("  own time by file:")
        for row in prof["tottime_by_file"][:12]:
            print(f"    {row['share']:6.1%} {row['tottime_s']:8.3f} s  {row['file']}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed schedule() runs per case (default 5)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    parser.add_argument(
        "--placement",
        default=SchedulerConfig().placement,
        help=f"placement plugin (default: the head's, {SchedulerConfig().placement})",
    )
    parser.add_argument("--policy", default="default", help="scheduling policy, as gpupool up --policy")
    parser.add_argument(
        "--cases", default="small,scale", help="comma-separated, of small,scale,big (default small,scale)"
    )
    parser.add_argument("--big", action="store_true", help="also run the big case (10,000 nodes; can take very long)")
    parser.add_argument("--big-repeats", type=int, default=1, help="timed runs of the big case (default 1)")
    parser.add_argument("--big-split", action="store_true", help="also split one more run of the big case")
    parser.add_argument("--profile", action="store_true", help="also cProfile one run per case")
    parser.add_argument("--top", type=int, default=15, help="functions shown by --profile (default 15)")
    parser.add_argument("--no-split", action="store_true", help="skip the phase split run")
    parser.add_argument("--trace", type=Path, default=TRACE, help=f"CSV with a num_gpus column (default {TRACE})")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--no-steady", action="store_true", help="skip the steady-state cycles")
    parser.add_argument("--steady-cycles", type=int, default=7, help="timed steady-state cycles (default 7)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed cycles after the cold one (default 3)")
    parser.add_argument("--changes", type=int, default=5, help="jobs ended and arrived per cycle (default 5)")
    parser.add_argument(
        "--tree", action="store_true", help="also the scale case under a 3-level tree of 200 projects beside it flat"
    )
    parser.add_argument("--sweep", action="store_true", help="also sweep the node count (steady and cold)")
    parser.add_argument("--sweep-nodes", default="100,1000,10000", help="node counts of --sweep")
    args = parser.parse_args(argv)
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    if args.big and "big" not in names:
        names.append("big")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: use {', '.join(CASES)}")
    if args.repeats < 1 or args.big_repeats < 1:
        parser.error("repeats must be at least 1")
    args.case_names = names
    args.sweep_nodes = [int(n) for n in args.sweep_nodes.split(",") if n.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine()
    trace = load_trace(args.trace)
    source = trace.source
    say: Callable[[str], None] = (lambda _line: None) if args.json else print
    say(machine_line(info))
    say(f"python {info['python']}; seed {args.seed}; pending job sizes from {source}")
    cases = []
    for name in args.case_names:
        case = run_case(name, args, trace)
        cases.append(case)
        if not args.json:
            print_case(case)
            sys.stdout.flush()
    tree = None
    if args.tree:
        tree = run_tree(args, trace)
        if not args.json:
            print_tree(tree)
    sweep = []
    if args.sweep:
        say("\nsweep (5 running and 10 pending jobs a node; steady: median of the timed cycles):")
        sweep = run_sweep(args, trace)
    if args.json:
        print(
            json.dumps(
                {"machine": info, "seed": args.seed, "trace": source, "cases": cases, "sweep": sweep, "tree": tree},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

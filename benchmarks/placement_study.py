"""FGD's placement study (Weng et al., ATC'23) on gpupool's placement plugins.

The protocol of the paper's simulator (hkust-adsl/kubernetes-scheduler-simulator), on the openb
files in ``../shared/traces/alibaba_gpu_v2023/``:

* the 1,213 GPU nodes of ``openb_node_list_gpu_node.csv`` (6,212 GPUs);
* the pods of ``openb_pod_list_default.csv``, sorted by name, shuffled with the seed, then
  "tuned": pods drawn at random from the list are appended until one more would take the total GPU
  request past 1.3 x the cluster's GPU capacity (the default list asks for 0.98 x); seeds 42..51;
* pods are placed one by one in that order and none leaves; a pod that fits nowhere is skipped;
* the metric: GPU allocation (thousandths of a GPU held by placed pods, shares counted by their
  thousandths, over the capacity) against arrived load (thousandths asked for by the pods so far,
  placed or not), discretised as the paper's ``merge_alloc_discrete.py`` does: at each whole
  percent of arrived load, the mean allocation of the pods whose arrived load rounds to it.

How each policy is driven (the scheduler's own code either way, one pod at a time):

* ``binpack``, ``spread``: the live scheduler's node choice, ``Session._best_node`` on a session
  over the cluster, and ``fit.build`` / ``ClusterState.take`` to place.
* ``frag`` (``scheduler/plugins/frag.py``, the head's default), ``frag-openb`` and ``fgd`` (the
  paper's score, rebuilt here to check this harness against the published figure). ``frag``
  measures nodes against the pool's own mix as a head does (``frag.for_pool``): the pods arrived
  so far; ``frag-openb`` and ``fgd`` against the typical pods of the pod list, known up front, as
  the paper gives FGD (openb's mix, ``frag.OPENB_MIX``; for ``fgd``, the tuned list's). Every node
  is scored, as ``_best_node`` does for a plugin that does not stop at the first bucket, but
  through the plugin's key-based entry (``FragPlacement.score_key`` on each node's key, kept up to
  date as pods land), which is the arithmetic ``score`` runs for the live scheduler; the best
  (score, node name) wins, as there.
  ``tests/scheduler/test_frag_placement.py`` checks that this choice is ``_best_node``'s. The paper's
  simulator also settles equal scores by the smallest node name.

Prints, per policy, the final allocation (mean over seeds at 130 % arrived) and the wall time per
replay; draws the curves beside the published ones to ``benchmarks/results/placement_study.png``
(needs matplotlib) and writes them to ``placement_study.csv``.

    .venv/bin/python benchmarks/placement_study.py [--seeds 42-51] [--policies binpack,spread,fgd,frag,frag-openb]
        [--tune 1.3] [--pods FILE] [--nodes FILE] [--no-plot] [--out benchmarks/results/placement_study]
        [--with EARLIER.csv]  # --policies "" --with A.csv --with B.csv: redraw earlier runs together
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from gpupool.domain.nodes import Node
from gpupool.domain.snapshot import Snapshot
from gpupool.scheduler import registry
from gpupool.scheduler.cluster import ClusterState
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import open_session
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.fit import build
from gpupool.scheduler.plugins import frag
from gpupool.sim.cluster import load_cluster
from gpupool.sim.trace import load_openb

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "alibaba_gpu_v2023"
if not TRACES.is_dir():
    TRACES = Path("/work/shared/traces/alibaba_gpu_v2023")
RESULTS = Path(__file__).resolve().parent / "results"
PUBLISHED = {  # the simulator's policy directory names
    "01-Random": "Random",
    "02-DotProd": "DotProd",
    "03-GpuClustering": "GpuClustering",
    "04-GpuPacking": "GpuPacking",
    "05-BestFit": "BestFit",
    "06-FGD": "FGD",
}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
Pod = tuple[WorkerDemand, int]  # demand, GPU thousandths asked for


def workload(pods: Sequence[Pod], capacity: int, tune: float, seed: int) -> list[Pod]:
    """FGD's order and tuning: shuffled, then random pods appended (or the last ones dropped)
    until the request is ``tune`` x capacity. Go's generator is not Python's: the draws differ
    from the paper's, their law does not."""
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    target = tune * capacity
    total = sum(m for _, m in order)
    while total > target and order:
        total -= order.pop(rng.randrange(len(order)))[1]
    while True:
        demand, milli = pods[rng.randrange(len(pods))]
        # The simulator compares the per-GPU request (its PodResource.MilliGpu) here, not the total.
        if total + (demand.share or (frag.MILLI if demand.whole_gpus else 0)) > target:
            return order
        order.append((demand, milli))
        total += milli


def replay(nodes: Sequence[Node], pods: Sequence[Pod], policy: str) -> list[tuple[int, int]]:
    """(arrived, allocated) GPU thousandths after each pod."""
    cluster = open_session(Snapshot(T0, tuple(nodes), (), ()), SchedulerConfig(placement="binpack")).cluster
    choose = _keyed(cluster, policy, pods) if policy in ("frag", "frag-openb", "fgd") else _live(cluster, policy)
    arrived = used = 0
    curve = []
    for demand, milli in pods:
        arrived += milli
        placed = choose(demand)
        if placed:
            used += milli
        curve.append((arrived, used))
    return curve


def _live(cluster: ClusterState, policy: str) -> Callable[[WorkerDemand], bool]:
    snapshot = Snapshot(T0, cluster.all_nodes, (), ())
    session = open_session(snapshot, SchedulerConfig(placement=policy))
    session.cluster = cluster
    plugin = registry.placement(policy)

    def choose(demand: WorkerDemand) -> bool:
        free = session._best_node(demand, plugin)
        if free is None:
            return False
        cluster.take(build(free, demand, 0, plugin.pick_gpus))
        return True

    return choose


def _keyed(cluster: ClusterState, policy: str, pods: Sequence[Pod]) -> Callable[[WorkerDemand], bool]:
    frees = [cluster.nodes[name] for name in sorted(cluster.nodes)]
    plugin = frag.DEFAULT  # frag-openb: openb's mix, the pod list's typical shapes, known up front
    score: Callable[[frag.NodeKey, frag.DemandKey], tuple[int, ...] | None] = plugin.score_key
    if policy == "fgd":  # the paper's typical pods: from the pod list itself
        plugin = frag.FragPlacement(frag.Mix.typical(d for d, _ in pods))
        score = _fgd_score(plugin)
    with_model = plugin.mix.constrained or any(d.models is not None for d, _ in pods)
    keys = [frag.node_key(f, with_model) for f in frees]
    arrived: Counter[WorkerDemand] = Counter()
    pool: frag.FragPlacement | None = None

    def choose(demand: WorkerDemand) -> bool:
        """The best (score, node name) among nodes where the worker fits, as ``_best_node``.
        ``frag`` measures against the pool's own mix as the head does (``frag.for_pool``): the
        pods arrived so far, the one being placed included (none leaves)."""
        nonlocal score, pool
        wanted = frag.demand_key(demand)
        if policy == "frag":
            arrived[demand] += 1
            pool = frag.for_pool(arrived.items(), pool)
            score = pool.score_key
        best: tuple[int, ...] | None = None
        chosen = -1
        for i, key in enumerate(keys):
            s = score(key, wanted)
            if s is None or (best is not None and s >= best) or frees[i].free_memory < demand.memory_mib:
                continue
            best, chosen = s, i
        if chosen < 0:
            return False
        cluster.take(build(frees[chosen], demand, 0))
        keys[chosen] = frag.node_key(frees[chosen], with_model)
        return True

    return choose


def _fgd_score(plugin: frag.FragPlacement) -> Callable[[frag.NodeKey, frag.DemandKey], tuple[int, ...] | None]:
    """The paper's score: 100 x sigmoid(fragmentation before - after, in GPUs), an integer,
    higher better (negated here); its Kubernetes fork settles equal scores by the smallest node
    name (``selectHost``), as ``choose`` does."""
    memo: dict[tuple[frag.NodeKey, frag.DemandKey], tuple[int, ...] | None] = {}

    def score(key: frag.NodeKey, demand: frag.DemandKey) -> tuple[int, ...] | None:
        known = memo.get((key, demand), ())
        if known != ():
            return known
        after = frag.place(key, demand)
        result = None
        if after is not None:
            growth = (plugin.fragmentation(after) - plugin.fragmentation(key)) / 1000
            result = (-int(100 / (1 + math.exp(growth))),)
        memo[(key, demand)] = result
        return result

    return score


def discretise(curve: Sequence[tuple[int, int]], capacity: int) -> dict[int, float]:
    """The paper's ``merge_alloc_discrete.py``: arrived % rounded to whole percents, allocation %
    averaged among the pods at each; a percent no pod hit takes the pods within one of it."""
    rows = [(round(a / capacity * 100), u / capacity * 100) for a, u in curve]
    by: dict[int, list[float]] = {}
    for arrived, alloc in rows:
        by.setdefault(arrived, []).append(alloc)
    out = {}
    for percent in range(131):
        values = by.get(percent) or [v for p in (percent - 1, percent, percent + 1) for v in by.get(p, [])]
        if values:
            out[percent] = statistics.fmean(values)
    return out


def published(path: Path, trace: str, tune: str) -> dict[str, dict[int, float]]:
    """The paper's curves (mean over its seeds) for one pod list."""
    sums: dict[str, dict[int, list[float]]] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row["workload"] != trace or row["tune"] != tune:
                continue
            name = PUBLISHED.get(row["sc_policy"], row["sc_policy"])
            for percent in range(131):
                if row.get(str(percent)):
                    sums.setdefault(name, {}).setdefault(percent, []).append(float(row[str(percent)]))
    return {name: {p: statistics.fmean(v) for p, v in curve.items()} for name, curve in sums.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="42-51", help="seeds: 42-51 or 42,43 (default 42-51)")
    parser.add_argument("--policies", default="binpack,spread,fgd,frag,frag-openb", help="comma-separated")
    parser.add_argument("--tune", type=float, default=1.3, help="GPU request over capacity (default 1.3)")
    parser.add_argument("--pods", type=Path, default=TRACES / "openb_pod_list_default.csv")
    parser.add_argument("--nodes", type=Path, default=TRACES / "openb_node_list_gpu_node.csv")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--with",
        dest="with_",
        type=Path,
        action="append",
        default=[],
        help="add an earlier run's curves (its CSV)",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "placement_study", help="where the .csv and .png go (without suffix)"
    )
    args = parser.parse_args()
    seeds = _seeds(args.seeds)
    nodes = load_cluster(args.nodes)
    capacity = frag.MILLI * sum(len(n.gpus) for n in nodes)
    jobs = sorted(load_openb(args.pods), key=lambda j: j.job_id)
    pods = [(d, d.share or d.whole_gpus * frag.MILLI) for d in (WorkerDemand.of(j.spec) for j in jobs)]
    print(f"{len(nodes)} nodes, {capacity // frag.MILLI} GPUs; {len(pods)} pods in {args.pods.name}; tune {args.tune}")
    curves: dict[str, dict[int, float]] = {}
    for path in args.with_:
        curves.update(_read_csv(path))
    for policy in filter(None, args.policies.split(",")):
        finals, walls, sizes, per_seed = [], [], [], []
        for seed in seeds:
            order = workload(pods, capacity, args.tune, seed)
            started = time.perf_counter()
            curve = replay(nodes, order, policy)
            walls.append(time.perf_counter() - started)
            sizes.append(len(order))
            points = discretise(curve, capacity)
            per_seed.append(points)
            finals.append(points[max(points)])
        curves[f"{policy}, seeds {args.seeds}"] = {
            p: statistics.fmean(c[p] for c in per_seed if p in c) for p in per_seed[0]
        }
        spread = f" ± {statistics.stdev(finals):.2f}" if len(finals) > 1 else ""
        print(
            f"{policy:10} final allocation {statistics.fmean(finals):6.2f} %{spread} (seeds {args.seeds}); "
            f"{statistics.fmean(sizes):,.0f} pods a replay, {statistics.fmean(walls):.1f} s a replay "
            f"(max {max(walls):.1f} s)"
        )
    paper = published(TRACES / "fgd_expected_results" / "analysis_allo_discrete.csv", args.pods.stem, f"{args.tune:g}")
    for name, curve in paper.items():
        print(f"{name:14} published {curve[max(curve)]:6.2f} % (the paper's 10 seeds)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _write_csv(args.out.with_suffix(".csv"), curves, paper)
    if not args.no_plot:
        _plot(args.out.with_suffix(".png"), curves, paper, args.pods.stem)


def _seeds(text: str) -> list[int]:
    if "-" in text:
        first, last = text.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in text.split(",")]


def _read_csv(path: Path) -> dict[str, dict[int, float]]:
    with path.open(newline="") as handle:
        return {
            row["policy"]: {p: float(row[str(p)]) for p in range(131) if row.get(str(p))}
            for row in csv.DictReader(handle)
            if row["source"] == "gpupool"
        }


def _write_csv(path: Path, ours: dict[str, dict[int, float]], paper: dict[str, dict[int, float]]) -> None:
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["policy", "source", *range(131)])
        for source, curves in (("gpupool", ours), ("published", paper)):
            for name, curve in curves.items():
                out.writerow([name, source, *(f"{curve[p]:.2f}" if p in curve else "" for p in range(131))])
    print(f"curves written to {path}")


def _plot(path: Path, ours: dict[str, dict[int, float]], paper: dict[str, dict[int, float]], trace: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[bench]')")
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, curve in paper.items():
        xs = sorted(curve)
        ax.plot(xs, [curve[x] for x in xs], linestyle="--", linewidth=1, label=f"{name} (published)")
    for name, curve in ours.items():
        xs = sorted(curve)
        ax.plot(xs, [curve[x] for x in xs], linewidth=2, label=f"gpupool {name}")
    ax.plot([0, 100, 130], [0, 100, 100], color="grey", linewidth=0.5)
    ax.set_xlabel("arrived workload (% of GPU capacity)")
    ax.set_ylabel("GPU allocation (%)")
    ax.set_title(f"{trace}: GPU allocation vs arrived load (tune 1.3), mean over seeds")
    ax.set_xlim(60, 130)
    ax.set_ylim(60, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


if __name__ == "__main__":
    main()

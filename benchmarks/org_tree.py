"""The contended Philly replay under an organisation (issue 34): its 11 virtual clusters grouped
under 3 units, per-unit and per-project queueing beside the same replay flat.

The VCs keep their Helios quotas (node num x 8 GPUs); each unit's quota is the sum of its VCs'
(so nothing is given or taken away, only grouped), with no unit limit: what changes is that
fair share is split level by level and a VC's unused GPUs go first to its siblings, and reclaim
returns GPUs to the level that lent them. The flat run's jobs are grouped the same way after the
fact, so both columns count the same jobs.

Units (nodes): ``big`` 6214e9 + b436b2 (128), ``mid`` ee9e8c + 7f04ca + 6c71a0 (128), ``small``
11cb48 + e13805 + 2869ce + ed69ec + 103959 + 0e4a51 (96).

The default run is two weeks of Helios' window (2017-10-01 to 10-15) with the contended case's
scaling (durations x 2.573, arrivals x 2.5), about a minute on the 2-core VM; ``--window
2017-10-01,2017-12-01`` is the two months (some 5 minutes).

    .venv/bin/python benchmarks/org_tree.py [--window 2017-10-01,2017-10-15] [--policy default] [--json]
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import _philly

from gpupool.domain.projects import Project
from gpupool.sim.cluster import uniform
from gpupool.sim.fairness import per_unit

UNITS = {
    "big": ("6214e9", "b436b2"),
    "mid": ("ee9e8c", "7f04ca", "6c71a0"),
    "small": ("11cb48", "e13805", "2869ce", "ed69ec", "103959", "0e4a51"),
}
KEYS = ("jobs", "avg_queue_s", "p95_queue_s", "avg_slowdown")


def organise(flat: list[Project]) -> list[Project]:
    """The VCs under their units, each unit's quota the sum of its VCs'."""
    parent = {f"vc-{vc}": unit for unit, vcs in UNITS.items() for vc in vcs}
    missing = sorted(set(parent) - {p.name for p in flat})
    if missing:
        raise SystemExit(f"the VC file lacks {', '.join(missing)}")
    quotas = {unit: sum(p.quota for p in flat if parent.get(p.name) == unit) for unit in UNITS}
    units = [Project(unit, quota=q) for unit, q in quotas.items()]
    return [*units, *(replace(p, parent=parent.get(p.name)) for p in flat)]


def main() -> None:
    parser = _philly.parser(__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    args = parser.parse_args()
    study, longer = _philly.load(args)
    tree = organise(study.projects)
    runs: dict[str, dict[str, Any]] = {}
    for label, projects in (("flat", study.projects), ("tree", tree)):
        started = time.perf_counter()
        result, figures = replace(study, jobs=longer, projects=projects).run(uniform(args.nodes, 8), args.policy)
        figures.pop("placed")
        # The flat run grouped as the tree groups it, so both count the same jobs per unit.
        figures["per_unit"] = per_unit(replace(result, projects=tuple(tree)))
        figures["wall_s"] = time.perf_counter() - started
        runs[label] = figures
    if args.json:
        print(json.dumps({"window": args.window, "policy": args.policy, **runs}, indent=2))
        return
    print(
        f"Philly {args.window}, {len(longer):,} jobs on {args.nodes} nodes x 8 GPUs, arrivals x{args.scale_load:g}, "
        f"durations x{args.duration_scale:g}, policy {args.policy}; wall flat {runs['flat']['wall_s']:.0f} s, "
        f"tree {runs['tree']['wall_s']:.0f} s"
    )
    totals = ("avg_queue_s", "p95_queue_s", "avg_jct_s", "gpu_utilization", "preemptions", "queue_fairness")
    print(f"{'':<18}" + "".join(f"{k:>16}" for k in totals))
    for label, figures in runs.items():
        print(f"{label:<18}" + "".join(f"{_cell(figures[k]):>16}" for k in totals))
    for level in ("per_unit", "per_project"):
        print(f"\n{level.replace('_', ' ')}: flat | tree")
        print(f"  {'':<12}" + "".join(f"{k:>14}" for k in KEYS) + " |" + "".join(f"{k:>14}" for k in KEYS[1:]))
        for name, flat_row in runs["flat"][level].items():
            tree_row = runs["tree"][level].get(name, {})
            cells = "".join(f"{_cell(flat_row[k]):>14}" for k in KEYS)
            cells += " |" + "".join(f"{_cell(tree_row.get(k)):>14}" for k in KEYS[1:])
            print(f"  {name:<12}{cells}")


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.0f}"
    return f"{value:,}"


if __name__ == "__main__":
    main()

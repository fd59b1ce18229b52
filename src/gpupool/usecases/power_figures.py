"""What ``/metrics`` says of the power budget (issue 33), read from the store at scrape time: the
budgets in force, what they count now (``domain/power_budget.py``: each held GPU at its launch
setting, idle ones at their idle draw) and how many caps the throttle applied."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.launch import PowerSetting
from gpupool.domain.power_budget import THROTTLED, PowerBudget, counted_by_node
from gpupool.store import nodes as node_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database


@dataclass(frozen=True, slots=True)
class PowerFigures:
    budget: PowerBudget
    counted: dict[str, float]  # watts counted per node that is not down
    throttles: int  # caps the throttle applied, by the events the store keeps

    @property
    def counted_w(self) -> float:
        return sum(self.counted.values())


def read(db: Database, cluster_w: float) -> PowerFigures:
    with db.read() as s:
        budget = PowerBudget(cluster_w, node_repo.power_budgets(s))
        nodes = node_repo.load_nodes(s)
        workers = worker_repo.live_power(s)
        throttles = node_repo.power_events(s, THROTTLED)
    holders: dict[tuple[str, int], list[PowerSetting | None]] = {}
    for w in workers:
        for index in w.gpus:
            holders.setdefault((w.node, index), []).append(w.setting)
    return PowerFigures(budget, counted_by_node(nodes, holders, budget), int(throttles or 0))

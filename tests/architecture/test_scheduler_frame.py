"""The scheduler's frame (issue 31 item 5): its modules stand on floors, and no import runs up one.

The hook types sit low (``hooks``), the session above them, then the actions, then the plugins
that implement the hooks, then the one registry that names the plugins, and ``schedule`` on top.
So the session and the actions call plugins only through the hooks the registry looked up, and a
new plugin touches its module and a line of the registry. Read from the source with ``ast``:
every import counts, in a function body or under ``if TYPE_CHECKING`` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from gpupool.scheduler import SchedulerConfig, registry
from gpupool.scheduler import __file__ as scheduler_init
from gpupool.scheduler.hooks import NodePenalty
from gpupool.scheduler.session import Session
from tests.support.builders import node, pending, snapshot
from tests.support.source_imports import imported_names

SCHEDULER = Path(scheduler_init).parent

# Bottom to top: a module may import its own floor and the floors below it, never one above.
# A unit is a module of gpupool/scheduler/ or a package there (actions, plugins); "__init__" is
# the package's own __init__.py (what ``from gpupool.scheduler import schedule`` reads).
FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    # The cluster model and pure helpers: free resources, demands, fits, explanations, config.
    (
        "parts",
        frozenset(
            {"capacity", "cluster", "config", "demand", "explain", "fair_share", "fit", "incremental"}
            | {"partition", "power", "reserved", "levels", "per_model"}
            | {"aging", "lending", "extras"}
        ),
    ),
    ("hooks", frozenset({"hooks"})),  # the types plugins implement: no plugin, no session
    # One cycle's working state and the helpers the actions share.
    (
        "session",
        frozenset(
            {"session", "reservation", "victims", "user_queue", "displace_index"} | {"user_limit", "extras_limits"}
        ),
    ),
    ("actions", frozenset({"actions"})),  # they call plugins only through session.hooks
    ("plugins", frozenset({"plugins"})),
    ("registry", frozenset({"registry", "policies"})),  # the one place that names the plugins
    ("cycle", frozenset({"cycle", "estimate", "__init__"})),
)


def upward(sources: Mapping[str, str]) -> list[str]:
    """Every import in ``sources`` (path under scheduler/ -> text) that runs up a floor, and
    every module on no floor."""
    floor = {unit: i for i, (_, units) in enumerate(FLOORS) for unit in units}
    found = []
    for path, source in sorted(sources.items()):
        mine = _unit(path)
        if mine not in floor:
            found.append(f"{path}: {mine} is on no floor of FLOORS")
            continue
        for name in sorted(_imports(source, path)):
            theirs = _imported_unit(name, floor)
            if theirs is not None and floor[theirs] > floor[mine]:
                found.append(
                    f"{path} ({FLOORS[floor[mine]][0]}) imports {name} ({FLOORS[floor[theirs]][0]}): up a floor"
                )
    return found


def read_sources() -> dict[str, str]:
    return {p.relative_to(SCHEDULER).as_posix(): p.read_text() for p in SCHEDULER.rglob("*.py")}


def test_no_import_in_the_scheduler_runs_up_a_floor() -> None:
    assert upward(read_sources()) == []


def test_the_check_catches_an_upward_import_and_an_unplaced_module() -> None:
    real = read_sources()
    fake = {
        **real,
        "session.py": real["session.py"] + "\nfrom gpupool.scheduler import registry\n",
        "actions/bad.py": "def f():\n    from gpupool.scheduler.plugins.queues import FAIR_SHARE\n",
        "hooks.py": real["hooks.py"] + "\nif TYPE_CHECKING:\n    from gpupool.scheduler.session import Session\n",
        "plugins/bad.py": "from ..registry import hooks\n",
        "telemetry.py": "",
    }
    assert set(upward(fake)) == {
        "session.py (session) imports gpupool.scheduler.registry (registry): up a floor",
        "actions/bad.py (actions) imports gpupool.scheduler.plugins.queues.FAIR_SHARE (plugins): up a floor",
        "hooks.py (hooks) imports gpupool.scheduler.session.Session (session): up a floor",
        "plugins/bad.py (plugins) imports gpupool.scheduler.registry.hooks (registry): up a floor",
        "telemetry.py: telemetry is on no floor of FLOORS",
    }


def test_a_node_penalty_orders_nodes_before_the_placement_score() -> None:
    """Penalised nodes are taken only where no less penalised one fits: level by level (the
    replica spread uses one level; the frame takes any)."""
    jobs = [pending(i, gpus=4) for i in (1, 2, 3)]
    shunned: NodePenalty = lambda job: {"n1": 2, "n2": 1}  # noqa: E731

    config = SchedulerConfig(placement="binpack", actions=("allocate",), blocking="none")
    hooks = replace(registry.hooks(config), node_penalties=(lambda session: shunned,))
    session = Session.open(snapshot([node("n1"), node("n2"), node("n3")], jobs), config, hooks)
    placed = []
    for job in jobs:
        placements = session.try_place_gang(job)
        assert placements is not None
        placed.append(placements[0].node)
    assert placed == ["n3", "n2", "n1"]  # binpack alone would have put the first on n1


def _imports(source: str, path: str) -> set[str]:
    return imported_names(source, ["gpupool", "scheduler", *Path(path).parent.parts])


def _imported_unit(name: str, floor: Mapping[str, int]) -> str | None:
    """The scheduler unit ``name`` loads; None outside the scheduler. A name of the package
    itself (``gpupool.scheduler.schedule``) is its __init__."""
    parts = name.split(".")
    if parts[:2] != ["gpupool", "scheduler"]:
        return None
    if len(parts) > 2 and parts[2] in floor:
        return parts[2]
    return "__init__"


def _unit(path: str) -> str:
    return path.split("/")[0].removesuffix(".py")

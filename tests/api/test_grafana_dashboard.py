"""deploy/grafana-dashboard.json: Grafana-shaped (unique ids, every query on the ``${datasource}``
variable, panels that do not overlap), and every series and label its PromQL names is one the
real ``GET /metrics`` exposes, scraped from a real store and controller with nodes, projects,
jobs and GPU telemetry (an XID included), so that no panel quietly shows "No data"."""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.app import create_app
from gpupool.api.prometheus import SchedulerMetrics
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.controller.services import ServiceReconciler
from gpupool.domain.jobs import JobSpec
from gpupool.domain.projects import Project
from gpupool.domain.services import ServiceSpec
from gpupool.domain.telemetry import GpuSample
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store.db import Database
from gpupool.store.tokens import Principal, create_token
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from gpupool.usecases import services as service_layer
from gpupool.usecases.context import HeadContext
from gpupool.usecases.load import ReplicaLoad
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
BUILTIN_VARIABLES = {"__interval", "__interval_ms", "__rate_interval", "__range", "__range_s", "__range_ms"}

# ---- A small PromQL reader: enough to find the series, the labels and the groupings an expression names.

AGGREGATORS = {
    "sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "limitk", "limit_ratio",
}  # fmt: skip
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "day_of_month",
    "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar",
    "histogram_sum", "holt_winters", "double_exponential_smoothing", "hour", "idelta", "increase", "irate",
    "label_join", "label_replace", "ln", "log2", "log10", "minute", "month", "predict_linear", "rate", "resets",
    "round", "scalar", "sgn", "sort", "sort_desc", "sort_by_label", "sort_by_label_desc", "sqrt", "time",
    "timestamp", "vector", "year", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
    "count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time", "last_over_time",
    "present_over_time", "mad_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin",
    "sinh", "tan", "tanh", "deg", "rad", "pi", "start", "end",
}  # fmt: skip
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
GROUPING = {"by", "without"}
MATCHING = {"on", "ignoring", "group_left", "group_right"}

_TOKEN = re.compile(
    r"""
      (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
    | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
    | (?P<range>\[[^\]]*\])
    | (?P<duration>(?:\d+(?:ms|[smhdwy]))+\b)
    | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},@])
    | (?P<space>\s+)
    """,
    re.VERBOSE,
)
_VARIABLE_NAME = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


@dataclass
class Selector:
    metric: str
    labels: set[str] = field(default_factory=set)  # the label names its {...} matches on


@dataclass
class Grouping:
    """Labels an aggregation's by/without or a binary operation's on/ignoring names, over the
    series of its operands: each must carry them (group_left/group_right: at least one)."""

    keyword: str
    labels: list[str]
    metrics: list[str]


@dataclass
class Query:
    selectors: list[Selector] = field(default_factory=list)
    groupings: list[Grouping] = field(default_factory=list)
    variables: set[str] = field(default_factory=set)


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot read {expr[pos:]!r} in {expr!r}")
        pos = match.end()
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            out.append((kind, match.group()))
    return out


def parse(expr: str) -> Query:  # noqa: C901 - one pass over the tokens, one branch per kind
    query = Query(variables={next(g for g in m.groups() if g) for m in _VARIABLE_NAME.finditer(expr)})
    toks = tokens(expr)
    frames: list[list[str]] = [[]]  # metrics under each open parenthesis, the expression's at the bottom
    opened: list[Grouping | None] = []  # the aggregation each open parenthesis is the argument of
    pending: Grouping | None = None  # an aggregation whose argument has not opened yet
    closed: Grouping | None = None  # the aggregation whose argument just closed (for a trailing by)
    i = 0

    def at(j: int) -> str:
        return toks[j][1] if j < len(toks) else ""

    def label_list(j: int) -> tuple[list[str], int]:
        if at(j) != "(":
            return [], j
        names, j = [], j + 1
        while at(j) != ")":
            if toks[j][0] == "ident":
                names.append(toks[j][1])
            elif at(j) != ",":
                raise ValueError(f"unexpected {at(j)!r} in a label list of {expr!r}")
            j += 1
        return names, j + 1

    def matchers(j: int, metric: str | None) -> tuple[Selector, int]:
        assert at(j) == "{"
        selector, j = Selector(metric or ""), j + 1
        while at(j) != "}":
            kind, text = toks[j]
            if kind == "ident" and at(j + 1) in ("=", "!=", "=~", "!~"):
                if text == "__name__" and at(j + 1) == "=" and toks[j + 2][0] == "string":
                    selector.metric = toks[j + 2][1][1:-1]
                else:
                    selector.labels.add(text)
                j += 3
            elif text == ",":
                j += 1
            else:
                raise ValueError(f"unexpected {text!r} in a selector of {expr!r}")
        if not selector.metric:
            raise ValueError(f"a selector without a metric name in {expr!r}")
        return selector, j + 1

    while i < len(toks):
        kind, text = toks[i]
        if kind == "ident" and text in GROUPING:
            labels, i = label_list(i + 1)
            target = pending or closed
            if target is None:
                raise ValueError(f"{text} outside an aggregation in {expr!r}")
            target.keyword, target.labels = text, target.labels + labels
            continue
        closed = None
        if kind == "ident" and text in MATCHING:
            labels, i = label_list(i + 1)
            query.groupings.append(Grouping(text, labels, frames[-1]))  # the operands share the frame
            continue
        if kind == "ident" and text.lower() in KEYWORDS:
            pass
        elif kind == "ident" and text in AGGREGATORS and at(i + 1) in ("(", *GROUPING):
            pending = Grouping("sum", [], [])
            query.groupings.append(pending)
        elif kind == "ident" and at(i + 1) == "(":
            if text not in FUNCTIONS:
                raise ValueError(f"unknown function {text!r} in {expr!r}")
        elif kind == "ident":
            selector = Selector(text)
            if at(i + 1) == "{":
                selector, i = matchers(i + 1, text)
                i -= 1
            query.selectors.append(selector)
            for frame in frames:
                frame.append(selector.metric)
        elif text == "{":
            selector, i = matchers(i, None)
            query.selectors.append(selector)
            for frame in frames:
                frame.append(selector.metric)
            continue
        elif text == "(":
            frames.append(pending.metrics if pending else [])
            opened.append(pending)
            pending = None
        elif text == ")":
            frames.pop()
            closed = opened.pop()
        i += 1
    if len(frames) != 1:
        raise ValueError(f"unbalanced parentheses in {expr!r}")
    return query


def output_labels(query: Query, exposed: dict[str, set[str]]) -> set[str]:
    """Labels that can survive to the result: those of every series named, narrowed by each aggregation."""
    labels = set.intersection(*(exposed.get(s.metric, set()) for s in query.selectors)) - {"le"}
    for grouping in query.groupings:
        if grouping.keyword == "by":
            labels &= set(grouping.labels)
        elif grouping.keyword == "without":
            labels -= set(grouping.labels)
        elif grouping.keyword == "sum":  # an aggregation with neither: one series, no labels
            labels = set()
    return labels


@pytest.mark.parametrize(
    ("expr", "selectors", "groupings"),
    [
        ('up{job="x"}', {"up": {"job"}}, []),
        (
            'histogram_quantile(0.95, sum by (le) (rate(a_bucket{b=~"$v"}[$__rate_interval])))',
            {"a_bucket": {"b"}},
            [("by", ["le"], ["a_bucket"])],
        ),
        (
            "sum(rate(a[5m])) by (x, y) / on (x) group_left (z) max without (w) (b offset 1h) * 3.6e9",
            {"a": set(), "b": set()},
            [
                ("by", ["x", "y"], ["a"]),
                ("on", ["x"], ["a", "b"]),
                ("group_left", ["z"], ["a", "b"]),
                ("without", ["w"], ["b"]),
            ],
        ),
        ('{__name__="c", d!="1"} > bool 0 and e', {"c": {"d"}, "e": set()}, []),
        ("sum(f)", {"f": set()}, [("sum", [], ["f"])]),
        ("g and (h) unless bool(i)", {"g": set(), "h": set(), "i": set()}, []),
    ],
)
def test_the_promql_reader(
    expr: str, selectors: dict[str, set[str]], groupings: list[tuple[str, list[str], list[str]]]
) -> None:
    query = parse(expr)
    assert {s.metric: s.labels for s in query.selectors} == selectors
    assert sorted((g.keyword, g.labels, sorted(g.metrics)) for g in query.groupings) == sorted(groupings)


@pytest.mark.parametrize("expr", ["sum(rate(a[5m]) by (x)", "nosuchfunction(a)", "a{b}", '{b="1"}'])
def test_the_promql_reader_refuses_what_it_cannot_read(expr: str) -> None:
    with pytest.raises(ValueError):
        parse(expr)


# ---- The dashboard's shape


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def all_panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", ())  # a collapsed row keeps its panels inside it


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in board["templating"]["list"]}


def label_values(query: str) -> tuple[str, str]:
    """``label_values(selector, label)`` -> (selector, label)."""
    match = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*", query)
    assert match, f"not a label_values() query: {query!r}"
    return match.group(1), match.group(2)


def expressions(board: dict[str, Any]) -> Iterator[tuple[str, str, str | None]]:
    """(where, PromQL, legend) for every panel query, and the selector of every variable query."""
    for panel in all_panels(board):
        for target in panel.get("targets", ()):
            yield (
                f"panel {panel['id']} {panel['title']!r} {target['refId']}",
                target["expr"],
                target.get("legendFormat"),
            )
    for name, variable in variables(board).items():
        if variable["type"] == "query":
            yield f"variable {name}", label_values(variable["query"]["query"])[0], None


def test_dashboard_is_grafana_shaped() -> None:
    board = dashboard()
    assert board["uid"] == "gpupool-cluster" and board["title"]
    assert 36 <= board["schemaVersion"] <= 41
    assert board.get("id") is None  # Grafana assigns it; a fixed one clashes on import
    assert "__inputs" not in board  # the datasource variable instead: file provisioning does not fill __inputs
    panels = list(all_panels(board))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert {p["type"] for p in panels} <= {"row", "stat", "timeseries", "gauge", "bargauge", "table"}
    for panel in panels:
        where = f"panel {panel['id']} {panel.get('title')!r}"
        assert panel.get("title"), where
        if panel["type"] == "row":
            assert "datasource" not in panel and "targets" not in panel, where
            continue
        assert panel["datasource"] == DATASOURCE, where
        assert panel["targets"], where
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), where
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, where
            assert target["expr"].strip(), where


def test_no_datasource_is_hard_coded() -> None:
    """Every datasource anywhere in the file is the ``${datasource}`` variable."""

    def walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "datasource":
                    yield path, item
                yield from walk(item, f"{path}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from walk(item, f"{path}[{index}]")

    found = list(walk(dashboard(), "$"))
    assert found
    assert [(path, ds) for path, ds in found if ds != DATASOURCE] == []


def test_template_variables() -> None:
    board = dashboard()
    found = variables(board)
    datasource = found["datasource"]
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    for name in ("Hostname", "project"):
        variable = found[name]
        assert variable["type"] == "query" and variable["datasource"] == DATASOURCE
        assert variable["multi"] and variable["includeAll"]
        assert label_values(variable["query"]["query"])[1] == name
        assert variable["definition"] == variable["query"]["query"]
    # Every variable an expression uses is defined (or one of Grafana's own), and each filter is used.
    used: set[str] = set()
    for where, expr, _ in expressions(board):
        names = parse(expr).variables
        assert names <= set(found) | BUILTIN_VARIABLES, where
        used |= names
    assert {"Hostname", "project"} <= used


def test_panels_do_not_overlap() -> None:
    board = dashboard()
    cells: dict[tuple[int, int], str] = {}
    for panel in board["panels"]:  # a collapsed row's panels are laid out when it opens: only the top level
        grid = panel["gridPos"]
        x, y, w, h = grid["x"], grid["y"], grid["w"], grid["h"]
        where = f"panel {panel['id']} {panel['title']!r}"
        assert w > 0 and h > 0 and x >= 0 and y >= 0 and x + w <= GRID_WIDTH, where
        if panel["type"] == "row":
            assert (x, w, h) == (0, GRID_WIDTH, 1), where
        for cell in ((cx, cy) for cx in range(x, x + w) for cy in range(y, y + h)):
            assert cell not in cells, f"{where} overlaps {cells[cell]}"
            cells[cell] = where


# ---- The dashboard against the real /metrics


class ScenarioExecutor(FakeExecutor):
    """Simulated telemetry, with an XID 79 on node-1's GPU 1 (the simulation reports none) and the
    GPUs in ``idle`` reading 0 % even while a job holds them."""

    idle: frozenset[tuple[str, int]] = frozenset()

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        samples = super().telemetry(node, busy)
        samples = [replace(s, utilization_pct=0.0) if (s.node, s.index) in self.idle else s for s in samples]
        return [replace(s, xid_errors=1, last_xid=79) if (s.node, s.index) == ("node-1", 1) else s for s in samples]


@dataclass
class Scrape:
    samples: dict[str, set[str]]  # every sample name, with the label names its samples carry
    families: set[str]  # every family, with samples or not (a counter's without its _total)


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Database]:
    """The dashboard does not care which engine the store runs on: SQLite only."""
    database = Database(f"sqlite:///{tmp_path / 'gpupool.sqlite'}")
    database.migrate()
    yield database
    database.close()


@pytest.fixture
def scrape(sqlite: Database, now: datetime) -> Scrape:
    """/metrics over 3 nodes x 2 GPUs; projects a (quota 2, limit 3), b (quota 1) and lab-x (1) under
    unit lab (quota 1, limit 2). a1 (a, 2 GPUs)
    and b1 (b, 1) run, a2 (a, 2) waits beyond a's limit, b2 (b, 1) succeeded; b1's GPU reads 0 %
    for 11 minutes (idle); then node-3 goes down."""
    clock = FakeClock(now)
    nodes = uniform(3, 2, gpu_model="NVIDIA H100 80GB HBM3")
    executor = ScenarioExecutor(nodes, clock=clock)
    metrics = SchedulerMetrics()
    settings = ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf, node_sync_s=0.0, telemetry_every_s=5.0)
    controller = Controller(
        sqlite,
        executor,
        clock,
        SchedulerConfig(),
        settings,
        on_cycle=metrics.observe_cycle,
        on_first_start=metrics.observe_first_start,
    )
    ctx = HeadContext(sqlite, clock, executor, controller.wake, power_budget_w=20_000)  # a pool with a power budget
    admin, alice = Principal("root", "admin"), Principal("alice", "user")
    with sqlite.tx() as s:
        token = create_token(s, "alice", "user", now)
    controller.tick()
    # lab, a unit over lab-x (issue 34), so that the per-unit series have samples too.
    units = (Project.create("lab", 1, limit=2), Project.create("lab-x", 1, parent="lab"))
    for project in (Project.create("a", 2, limit=3), Project.create("b", 1), *units):
        project_service.set_project(ctx, project, admin, everyone=True)

    def submit(project: str, gpus: float) -> int:
        return job_service.submit(ctx, JobSpec.create(command=["x"], project=project, gpus=gpus), alice).id

    submit("a", 2)
    idle = submit("b", 1)
    done = submit("b", 1)
    clock.advance(10)
    controller.tick()
    placement = job_service.get(ctx, idle).placements[0]
    executor.idle = frozenset((placement.node, gpu) for gpu in placement.gpus)
    submit("a", 2)
    executor.exit(done, 0)
    for _ in range(11):  # a telemetry round a minute: past the default idle time (10 minutes)
        clock.advance(60)
        controller.tick()
    executor._nodes = nodes[:2]
    clock.advance(5)
    controller.tick()
    # A service of one replica (submitted, not started yet) and a gateway report of its load.
    service_layer.serve(ctx, ServiceSpec.create(name="web", command=["serve"], project="a", gpus=0), admin)
    ServiceReconciler(sqlite, clock, ctx.load, lambda: None, probe=lambda *_: None).step()
    line = ReplicaLoad("web", "1", in_flight=2, queued=1, requests=40, errors=1, latency_counts=(30, 10, 0))
    service_layer.record_load(ctx, 1.0, [line], (0.01, 0.1))
    with TestClient(create_app(ctx, metrics)) as client:
        response = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    out = Scrape({}, set())
    for family in text_string_to_metric_families(response.text):
        out.families.add(family.name)
        for sample in family.samples:
            out.samples.setdefault(sample.name, set()).update(sample.labels)
    # The scenario is what it says: per-GPU series of the live nodes, an XID, a limit.
    assert "DCGM_FI_DEV_XID_ERRORS" in out.samples and "gpupool_gpu_limit" in out.samples
    assert "gpupool_unit_gpu_limit" in out.samples
    return out


def problems_of(where: str, expr: str, legend: str | None, exposed: dict[str, set[str]]) -> list[str]:
    """What is wrong with one expression against the exposed series: unknown series, labels its
    matchers or groupings name that the series lack, legend labels the result does not carry."""
    query = parse(expr)
    if not query.selectors:
        return [f"{where}: no series in {expr!r}"]
    problems = [f"{where}: {s.metric} is not exposed by /metrics" for s in query.selectors if s.metric not in exposed]
    for selector in (s for s in query.selectors if s.metric in exposed):
        problems += [
            f"{where}: {selector.metric} has no label {label!r}"
            for label in sorted(selector.labels - exposed[selector.metric])
        ]
    for grouping in query.groupings:
        carriers = [m for m in grouping.metrics if m in exposed]
        for label in grouping.labels:
            have = [label in exposed[m] for m in carriers]
            if carriers and not (any(have) if grouping.keyword.startswith("group_") else all(have)):
                problems.append(f"{where}: {grouping.keyword} ({label}) over {carriers} lacking it")
    if legend and not problems:
        wanted = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        problems += [
            f"{where}: legend {legend!r} uses {label!r}, which the result does not carry"
            for label in sorted(wanted - output_labels(query, exposed))
        ]
    return problems


def test_every_series_and_label_the_dashboard_names_is_exposed(scrape: Scrape) -> None:
    """Series are matched by their exact sample names (a histogram's ``_bucket``/``_count``/``_sum``,
    a counter's ``_total``), as PromQL sees them, and must have samples in the scenario, so that
    their labels can be checked too."""
    board = dashboard()
    problems: list[str] = []
    for where, expr, legend in expressions(board):
        problems += problems_of(where, expr, legend, scrape.samples)
    for name, variable in variables(board).items():
        if variable["type"] == "query":
            selector, label = label_values(variable["query"]["query"])
            metric = parse(selector).selectors[0].metric
            if label not in scrape.samples.get(metric, {label}):
                problems.append(f"variable {name}: {metric} has no label {label!r}")
    missing = sorted({p.split(": ")[1].split()[0] for p in problems if p.endswith("is not exposed by /metrics")})
    assert not problems, f"missing series {missing}:\n" + "\n".join(problems)


def test_every_exposed_series_has_a_panel(scrape: Scrape) -> None:
    """The other way round: each gpupool_* and DCGM_* family /metrics exposes, with samples or
    not, appears in some query (for a histogram or counter, any of its samples)."""
    used = {s.metric for _, expr, _ in expressions(dashboard()) for s in parse(expr).selectors}

    def family(name: str) -> str:
        return re.sub(r"_(bucket|count|sum|created|total)$", "", name)

    unused = {family(n) for n in scrape.families | set(scrape.samples)} - {family(n) for n in used}
    assert sorted(n for n in unused if n.startswith(("gpupool_", "DCGM_"))) == []

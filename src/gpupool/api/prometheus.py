"""The series of ``GET /metrics``, in the Prometheus text format.

Two kinds:

- **Read at scrape time** by ``StoreCollector``, in one short read transaction
  (``usecases/metrics.py``); nothing elsewhere in the head updates a gauge, so the figures are
  never out of step with the store, and a head restart loses none of them:
  ``gpupool_jobs{state,project}``, ``gpupool_gpus_allocated{project}``, ``gpupool_gpu_quota{project}``,
  ``gpupool_gpu_limit{project}``, ``gpupool_gpu_fair_share{project}``, per unit of a tree of
  projects ``gpupool_unit_*{unit,parent}`` (``unit_families``), ``gpupool_nodes{state}``,
  ``gpupool_gpus{node,state}``; and per GPU, from its newest telemetry sample, dcgm-exporter's
  ``DCGM_FI_DEV_*`` series with its labels (``dcgm_families``); allocated-but-idle GPUs
  (``gpupool_gpus_idle{project}``, ``gpupool_gpu_idle_seconds{node,gpu,job,project,user}``) and
  alerts (``gpupool_alerts_active{kind}``, ``gpupool_alerts_total{kind}``).
- **Observed as it happens** by the controller, through ``SchedulerMetrics``, whose methods it is
  given as plain callables (it knows nothing of Prometheus): ``gpupool_scheduler_cycle_seconds``
  and ``gpupool_pending_seconds``. Kept in the head's memory: they start from zero with the head,
  like any Prometheus histogram, and ``rate()``/``increase()`` handle the reset.

Each app builds its own ``CollectorRegistry``: nothing goes into prometheus_client's global one,
so two heads (or two test apps) in one process never see each other's series.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpupool.clock import Clock
from gpupool.domain import exit_reasons
from gpupool.domain.idle import IdleSettings
from gpupool.domain.telemetry import GpuSample
from gpupool.store.db import Database
from gpupool.usecases import metrics as metrics_service
from gpupool.usecases import power_figures
from gpupool.usecases.metrics import ClusterFigures

CONTENT_TYPE = CONTENT_TYPE_LATEST
# A cycle takes milliseconds on a small cluster and can reach seconds with thousands of jobs.
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A job waits from an instant (a free pool) to days (a big gang in a busy one).
PENDING_BUCKETS = (
    1.0,
    5.0,
    15.0,
    30.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    43200.0,
    86400.0,
    259200.0,
)


class SchedulerMetrics:
    """What the controller observes: built once by the head (``head.py``), which hands
    ``observe_cycle`` and ``observe_first_start`` to the controller and the object to the app."""

    def __init__(self) -> None:
        self.cycle_seconds = Histogram(
            "gpupool_scheduler_cycle_seconds",
            "Time of each controller cycle that scheduled: reaping exits, loading the snapshot, "
            "scheduling and applying the decisions",
            buckets=CYCLE_BUCKETS,
            registry=None,
        )
        self.pending_seconds = Histogram(
            "gpupool_pending_seconds",
            "Time a job waited from its submission to its first start, observed when it starts "
            "(requeued attempts are not observed again)",
            buckets=PENDING_BUCKETS,
            registry=None,
        )

    def observe_cycle(self, seconds: float) -> None:
        self.cycle_seconds.observe(seconds)

    def observe_first_start(self, waited_s: float) -> None:
        self.pending_seconds.observe(max(0.0, waited_s))


class StoreCollector(Collector):
    """Reads the store at every scrape and yields the cluster's gauges."""

    def __init__(self, db: Database, clock: Clock, idle_after_s: float, power_budget_w: float = 0.0) -> None:
        self._db = db
        self._clock = clock
        self._idle_after_s = idle_after_s
        self._power_budget_w = power_budget_w

    def collect(self) -> Iterator[Metric]:
        figures = metrics_service.read(self._db, self._clock.now(), self._idle_after_s)
        yield from job_families(figures)
        yield from project_families(figures)
        yield from unit_families(figures)
        yield from node_families(figures)
        yield from idle_and_alert_families(figures)
        yield from dcgm_families(figures)
        yield from power_families(power_figures.read(self._db, self._power_budget_w))

    def describe(self) -> Iterable[Metric]:
        # Describing by collecting would read the store at registration; the names are fixed anyway.
        return ()


def build_registry(
    db: Database,
    scheduler: SchedulerMetrics,
    clock: Clock,
    idle_after_s: float = IdleSettings().after_s,
    power_budget_w: float = 0.0,
) -> CollectorRegistry:
    """A registry of the app's own: the store's gauges and the controller's histograms."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(db, clock, idle_after_s, power_budget_w))
    registry.register(scheduler.cycle_seconds)
    registry.register(scheduler.pending_seconds)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format; a scrape reads the store once."""
    return generate_latest(registry)


def job_families(figures: ClusterFigures) -> Iterator[Metric]:
    jobs = GaugeMetricFamily(
        "gpupool_jobs",
        "Jobs by state and project. pending, starting, running, preempted and lost: jobs in that "
        "state now; succeeded, failed and cancelled: every job in the store that ended so",
        labels=["state", "project"],
    )
    for (state, project), count in sorted(figures.jobs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        jobs.add_metric([state, project], count)
    yield jobs


def project_families(figures: ClusterFigures) -> Iterator[Metric]:
    """Per project, the figures ``gpupool projects`` shows (a fractional worker counts by its share)."""
    allocated = GaugeMetricFamily(
        "gpupool_gpus_allocated", "GPUs held by the project's live workers", labels=["project"]
    )
    quota = GaugeMetricFamily("gpupool_gpu_quota", "GPUs guaranteed to the project", labels=["project"])
    limit = GaugeMetricFamily(
        "gpupool_gpu_limit",
        "Most GPUs the project may hold, borrowing included (absent: no limit)",
        labels=["project"],
    )
    share = GaugeMetricFamily(
        "gpupool_gpu_fair_share",
        "The project's fair share: its quota plus its weight's part of the GPUs no quota covers, capped by its limit",
        labels=["project"],
    )
    for view in figures.projects:
        name = view.project.name
        allocated.add_metric([name], view.allocated)
        quota.add_metric([name], view.project.quota)
        share.add_metric([name], view.fair_share)
        if view.project.limit is not None:
            limit.add_metric([name], view.project.limit)
    yield from (allocated, quota, limit, share)


def unit_families(figures: ClusterFigures) -> Iterator[Metric]:
    """Per organisational unit (issue 34: a project with children), with the unit above it
    (``parent``, empty for a child of the root), so a dashboard can draw the tree level by level:
    what the projects below it hold and wait for, at any depth, against its quota, limit and fair
    share (split level by level). No samples in a flat list; ``gpupool_gpu_*{project}`` carry
    every project and unit as before."""
    labels = ["unit", "parent"]
    allocated = GaugeMetricFamily(
        "gpupool_unit_gpus_allocated", "GPUs held by the live workers of every project below the unit", labels=labels
    )
    pending = GaugeMetricFamily(
        "gpupool_unit_gpus_pending", "GPUs the waiting jobs of every project below the unit ask for", labels=labels
    )
    quota = GaugeMetricFamily("gpupool_unit_gpu_quota", "GPUs guaranteed to the unit", labels=labels)
    limit = GaugeMetricFamily(
        "gpupool_unit_gpu_limit",
        "Most GPUs the projects below the unit may hold together (absent: no limit)",
        labels=labels,
    )
    share = GaugeMetricFamily(
        "gpupool_unit_gpu_fair_share",
        "The unit's fair share, split from its parent's level by level",
        labels=labels,
    )
    units = {v.project.parent for v in figures.projects} - {None}
    for view in figures.projects:
        if view.project.name not in units:
            continue
        values = [view.project.name, view.project.parent or ""]
        allocated.add_metric(values, view.allocated)
        pending.add_metric(values, view.pending)
        quota.add_metric(values, view.project.quota)
        share.add_metric(values, view.fair_share)
        if view.project.limit is not None:
            limit.add_metric(values, view.project.limit)
    yield from (allocated, pending, quota, limit, share)


def node_families(figures: ClusterFigures) -> Iterator[Metric]:
    nodes = GaugeMetricFamily("gpupool_nodes", "Nodes by state", labels=["state"])
    for state, count in figures.nodes_by_state().items():
        nodes.add_metric([state], count)
    gpus = GaugeMetricFamily(
        "gpupool_gpus",
        "GPUs of each node by state, one state per GPU (sum by node: its GPU count): unhealthy (its probe "
        "says so or an admin took it out of service), allocated (a live worker holds it), unavailable "
        "(its node is not up), free (a new job could get it)",
        labels=["node", "state"],
    )
    for record in figures.nodes:
        for state, count in metrics_service.gpu_states(record).items():
            gpus.add_metric([record.node.name, state], count)
    yield from (nodes, gpus)


def idle_and_alert_families(figures: ClusterFigures) -> Iterator[Metric]:
    """Allocated-but-idle GPUs (per project, zeros included, and per GPU with how long), and
    alerts by kind: active now, and raised in all (cleared ones are kept 30 days, so a long-lived
    counter can step down when old ones are forgotten; ``rate()`` treats that as a reset)."""
    idle = GaugeMetricFamily(
        "gpupool_gpus_idle",
        "GPUs allocated to the project's jobs but idle: below the head's idle threshold for its idle time",
        labels=["project"],
    )
    by_project = Counter(g.project for g in figures.idle)
    for name in sorted({v.project.name for v in figures.projects} | set(by_project)):
        idle.add_metric([name], by_project.get(name, 0))
    seconds = GaugeMetricFamily(
        "gpupool_gpu_idle_seconds",
        "How long each idle allocated GPU has been below the idle threshold, with the job holding it",
        labels=["node", "gpu", "job", "project", "user"],
    )
    for g in figures.idle:
        seconds.add_metric([g.node, str(g.gpu), str(g.job_id), g.project, g.owner], g.idle_for_s)
    active = GaugeMetricFamily(
        "gpupool_alerts_active", "Alerts active now, by kind (gpupool alerts lists them)", labels=["kind"]
    )
    raised = CounterMetricFamily("gpupool_alerts", "Alerts raised, by kind", labels=["kind"])
    for kind in sorted(set(metrics_service.ALERT_KINDS) | set(figures.alerts_raised)):
        active.add_metric([kind], figures.alerts_active.get(kind, 0))
        raised.add_metric([kind], figures.alerts_raised.get(kind, 0))
    kills = CounterMetricFamily(
        "gpupool_worker_kills",
        "Workers their node killed for a reason it knows (oom: at the --memory limit; gpu_oom: over its"
        " share of a shared GPU's memory), by reason and project",
        labels=["reason", "project"],
    )
    # Every project's series from zero, so a first kill shows as an increase, not a new series.
    counted = {(r, v.project.name): 0 for r in exit_reasons.KILLED for v in figures.projects} | figures.kills
    for (reason, project), n in sorted(counted.items()):
        kills.add_metric([reason, project], n)
    yield from (idle, seconds, active, raised, kills, *_worker_usage(figures))


def _worker_usage(figures: metrics_service.ClusterFigures) -> tuple[GaugeMetricFamily, ...]:
    """Each running worker's memory and CPU from its cgroup, as of the last telemetry reading."""
    labels = ["job", "worker", "node", "project", "user"]
    memory = GaugeMetricFamily("gpupool_worker_memory_bytes", "Memory a running worker's cgroup uses", labels=labels)
    peak = GaugeMetricFamily(
        "gpupool_worker_memory_peak_bytes", "The most memory a running worker's cgroup has used", labels=labels
    )
    cpu = GaugeMetricFamily(
        "gpupool_worker_cpu_percent",
        "CPU a running worker used since the reading before (100: one core)",
        labels=labels,
    )
    for live in figures.usage:
        u = live.usage
        values = [str(live.job_id), str(u.worker), live.node, live.project, live.owner]
        for family, value in ((memory, u.memory_mib), (peak, u.memory_peak_mib)):
            if value is not None:
                family.add_metric(values, value * 2**20)
        if u.cpu_pct is not None:
            cpu.add_metric(values, u.cpu_pct)
    return memory, peak, cpu


# dcgm-exporter's names, units and types, so that Grafana dashboards made for it work unchanged.
_DCGM: tuple[tuple[str, str, str, Callable[[GpuSample], float | None]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda x: x.utilization_pct),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda x: x.memory_used_mib),
    (
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "Framebuffer memory free (in MiB).",
        lambda x: x.memory_total_mib - x.memory_used_mib,
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda x: x.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda x: x.power_w),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).", lambda x: x.power_limit_w),
    (  # a counter in dcgm-exporter; typed gauge here, as prometheus_client would rename a counter to ..._total
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "gauge",
        "Total energy consumption since boot (in mJ).",
        lambda x: None if x.energy_j is None else x.energy_j * 1000.0,
    ),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda x: x.last_xid),
)
DCGM_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]


def dcgm_families(figures: ClusterFigures) -> Iterator[Metric]:
    """Per GPU, the series dcgm-exporter publishes, from each GPU's newest telemetry sample, with
    its labels ``gpu`` (index), ``UUID``, ``device``, ``modelName`` and ``Hostname`` (the node).
    A reading the GPU does not offer is left out, never exported as 0; ``simulated="true"`` marks
    readings of simulated GPUs, which dashboards may filter out."""
    for name, kind, doc, value_of in _DCGM:
        family: Metric
        labels = [*DCGM_LABELS, "simulated"]
        family = Metric(name, doc, kind)
        for sample in figures.samples:
            value = value_of(sample)
            if value is None:
                continue
            model = figures.model_of(sample.node, sample.index)
            label_values = [str(sample.index), sample.uuid, f"nvidia{sample.index}", model, sample.node]
            family.add_sample(
                name, dict(zip(labels, [*label_values, str(sample.simulated).lower()], strict=True)), value
            )
        yield family


def power_families(figures: power_figures.PowerFigures) -> Iterator[Metric]:
    """The power budget (issue 33): ``scope`` is ``cluster`` or a node's name. A budget not in
    force has no series; what it counts is shown for the cluster and every node that is not down."""
    budget = GaugeMetricFamily(
        "gpupool_power_budget_watts", "GPU power budget in force: the pool's, and nodes' own", labels=["scope"]
    )
    if figures.budget.cluster_w > 0:
        budget.add_metric(["cluster"], figures.budget.cluster_w)
    for node, watts in sorted(figures.budget.nodes_w.items()):
        budget.add_metric([node], watts)
    counted = GaugeMetricFamily(
        "gpupool_power_counted_watts",
        "What the power budget counts now: each held GPU at its launch limit, idle GPUs at their idle draw",
        labels=["scope"],
    )
    counted.add_metric(["cluster"], figures.counted_w)
    for node, watts in sorted(figures.counted.items()):
        counted.add_metric([node], watts)
    throttles = CounterMetricFamily(
        "gpupool_power_throttles", "Caps the throttle applied to running jobs' GPUs over the power budget"
    )
    throttles.add_metric([], figures.throttles)
    yield from (budget, counted, throttles)

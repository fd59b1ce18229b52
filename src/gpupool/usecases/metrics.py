"""What ``GET /metrics`` reports about the cluster, read from the store at scrape time.

Plain figures, no Prometheus types: ``api/prometheus.py`` turns them into series. Everything is
read in one short transaction, so the figures of one scrape agree with each other (the GPUs a
project holds add up to the GPUs the nodes show allocated).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from gpupool.domain.alerts import AlertKind
from gpupool.domain.jobs import JobState
from gpupool.domain.nodes import GpuInfo, NodeState
from gpupool.domain.records import LiveUsage, NodeRecord
from gpupool.domain.telemetry import GpuSample
from gpupool.store import alerts as alert_repo
from gpupool.store import arrays as array_repo
from gpupool.store import idle as idle_repo
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store import telemetry as telemetry_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database
from gpupool.store.idle import IdleGpu
from gpupool.usecases.projects import ProjectView, views

# Each GPU is in exactly one of these, so that ``sum by (node)`` is the node's GPU count:
#   unhealthy    its probe reports it unhealthy or an admin took it out of service (a job may still hold it)
#   allocated    a live worker holds it (whole, or a share of it)
#   unavailable  on a node that is not up (draining, drained or down): no new job gets it
#   free         a new job could get it now (what ``gpupool nodes`` counts as free)
# Every GPU of a down node is ``unavailable``: what was last heard of its health is stale.
GPU_STATES = ("allocated", "free", "unhealthy", "unavailable")
NODE_STATES = tuple(s.value for s in NodeState)
JOB_STATES = tuple(s.value for s in JobState)
ALERT_KINDS = tuple(k.value for k in AlertKind)


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    # (state, project) -> jobs. Every state of every project that is listed or has jobs, zeros
    # included, so a series drops to 0 instead of vanishing. Finished states count every job the
    # store holds that ended so (the store keeps finished jobs), not only those since the head started.
    jobs: dict[tuple[str, str], int]
    projects: list[ProjectView]  # as ``gpupool projects`` shows them
    nodes: list[NodeRecord]  # as ``gpupool nodes`` shows them
    # The newest telemetry sample of every GPU of a node that is not down (a dead node's last
    # readings are stale: like dcgm-exporter on a dead machine, its GPUs' series disappear).
    samples: list[GpuSample] = field(default_factory=list)
    idle: list[IdleGpu] = field(default_factory=list)  # allocated GPUs idle for the head's idle time
    alerts_active: Counter[str] = field(default_factory=Counter)  # by kind
    alerts_raised: Counter[str] = field(default_factory=Counter)  # by kind, every alert kept
    kills: dict[tuple[str, str], int] = field(default_factory=dict)  # workers killed, by (reason, project)
    usage: list[LiveUsage] = field(default_factory=list)  # each live worker's cgroup reading

    def model_of(self, node: str, index: int) -> str:
        for record in self.nodes:
            if record.node.name == node:
                return next((g.model for g in record.node.gpus if g.index == index), "")
        return ""

    def nodes_by_state(self) -> dict[str, int]:
        counts = dict.fromkeys(NODE_STATES, 0)
        for record in self.nodes:
            counts[record.node.state.value] += 1
        return counts


def read(db: Database, now: datetime, idle_after_s: float) -> ClusterFigures:
    """One short read transaction; the arithmetic (fair shares, GPU states) happens after it."""
    with db.read() as s:
        counts = job_repo.count_by_state_and_project(s)
        for project, n in array_repo.unmade_by_project(s).items():  # an array's tasks not written yet
            counts[(JobState.PENDING.value, project)] = counts.get((JobState.PENDING.value, project), 0) + n
        projects = views(s)
        nodes = node_repo.node_records(s)
        latest = telemetry_repo.latest(s)
        idle = idle_repo.idle_gpus(s, now, idle_after_s)
        active, raised = alert_repo.counts(s)
        kills = worker_repo.kills_by_reason(s)
        usage = worker_repo.live_usage(s)
    down = {r.node.name for r in nodes if r.node.state is NodeState.DOWN}
    samples = [sample for sample in latest if sample.node not in down]
    names = sorted({v.project.name for v in projects} | {project for _, project in counts})
    jobs = {(state, name): counts.get((state, name), 0) for name in names for state in JOB_STATES}
    return ClusterFigures(
        jobs=jobs,
        projects=projects,
        nodes=nodes,
        samples=samples,
        idle=idle,
        alerts_active=active,
        alerts_raised=raised,
        kills=kills,
        usage=usage,
    )


def gpu_states(record: NodeRecord) -> dict[str, int]:
    """How many of the node's GPUs are in each of ``GPU_STATES``."""
    counts = dict.fromkeys(GPU_STATES, 0)
    for gpu in record.node.gpus:
        counts[gpu_state(record, gpu)] += 1
    return counts


def gpu_state(record: NodeRecord, gpu: GpuInfo) -> str:
    if record.node.state is NodeState.DOWN:
        return "unavailable"
    if not gpu.healthy:
        return "unhealthy"
    if gpu.index in record.used_gpus:
        return "allocated"
    if not record.node.schedulable:
        return "unavailable"
    return "free"

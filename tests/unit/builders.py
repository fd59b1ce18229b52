"""Small builders for declaring clusters and queues in table-driven tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def node(
    name: str,
    gpus: int = 4,
    *,
    cpus: int = 16,
    memory_mib: int = 65536,
    model: str = "Sim",
    state: NodeState = NodeState.UP,
    unhealthy: tuple[int, ...] = (),
    gpu_memory_mib: int = 81920,
) -> Node:
    return Node(
        name=name,
        state=state,
        address="127.0.0.1",
        gpus=tuple(
            GpuInfo(i, f"GPU-{name}-{i}", model, gpu_memory_mib, True, healthy=i not in unhealthy) for i in range(gpus)
        ),
        cpus=cpus,
        memory_mib=memory_mib,
    )


def pending(
    job_id: int,
    *,
    gpus: float = 1,
    workers: int = 1,
    cpus: float | str = 0,
    memory: str | None = None,
    priority: str = "train",
    at: float | None = None,
    gpu_model: str | None = None,
    project: str = "default",
    max_runtime_s: int | None = None,
    gpu_memory: str | None = None,
    owner: str = "",
) -> PendingJob:
    spec = JobSpec.create(
        max_runtime_s=max_runtime_s,
        gpu_memory=gpu_memory,
        command=["true"],
        gpus=gpus,
        workers=workers,
        cpus=cpus,
        memory=memory,
        priority=priority,
        gpu_model=gpu_model,
        project=project,
    )
    return PendingJob(job_id, spec, T0 + timedelta(seconds=job_id if at is None else at), owner=owner)


def running(
    job_id: int,
    *placements: tuple[str, tuple[int, ...]],
    share: float = 0.0,
    cpus: int = 0,
    project: str = "default",
    priority: str = "train",
    max_runtime_s: int | None = None,
    owner: str = "",
) -> RunningJob:
    gpus = share if share else float(len(placements[0][1]))
    spec = JobSpec.create(
        command=["true"],
        gpus=gpus,
        workers=len(placements),
        cpus=cpus,
        project=project,
        priority=priority,
        max_runtime_s=max_runtime_s,
    )
    return RunningJob(
        job_id,
        spec,
        tuple(Placement(w, n, g, gpu_share=share, cpus=tuple(range(cpus))) for w, (n, g) in enumerate(placements)),
        T0,
        owner=owner,
    )


def snapshot(
    nodes: list[Node],
    pending_jobs: list[PendingJob],
    running_jobs: list[RunningJob] | None = None,
    projects: list[Project] | None = None,
) -> Snapshot:
    return Snapshot(T0, tuple(nodes), tuple(running_jobs or ()), tuple(pending_jobs), tuple(projects or ()))

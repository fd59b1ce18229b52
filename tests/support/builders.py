"""Small builders for declaring clusters and queues in table-driven tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.domain.projects import Project
from gpupool.domain.records import WorkerRecord, WorkerStatus
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
    workers: int | str = 1,  # "2:8": an elastic job (issue 35)
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


GPU_CHOICES = [0, 0.25, 0.5, 0.75, 1, 2, 3, 4, 8]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list, list[PendingJob]]:  # type: ignore[type-arg]
    nodes = [
        node(
            f"n{i}",
            draw(st.integers(0, 8)),
            cpus=draw(st.integers(1, 16)),
            memory_mib=draw(st.sampled_from([4096, 65536])),
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    jobs = []
    for i in range(draw(st.integers(0, 25))):
        gpus = draw(st.sampled_from(GPU_CHOICES))
        workers = 1 if 0 < gpus < 1 else draw(st.integers(1, 3))
        jobs.append(
            pending(
                i + 1,
                gpu_memory=draw(st.sampled_from([None, None, "30G", "50G"])) if 0 < gpus < 1 else None,
                gpus=gpus,
                workers=workers,
                cpus=draw(st.one_of(st.integers(0, 4), st.sampled_from(["250m", "0.5", "1.5", "3.152"]))),
                memory=draw(st.sampled_from([None, "1G", "8G"])),
                priority=draw(st.sampled_from(["train", "interactive", "inference"])),
            )
        )
    return nodes, jobs


R, E, L = WorkerStatus.RUNNING, WorkerStatus.EXITED, WorkerStatus.LOST


def workers(*states: tuple[WorkerStatus, int | None]) -> list[WorkerRecord]:
    return [
        WorkerRecord(
            i,
            1,
            1,
            Placement(i, "n", (i,)),
            status,
            {"pid": 1},
            code,
            T0,
            None if status is R else T0 + timedelta(seconds=i),
        )
        for i, (status, code) in enumerate(states)
    ]

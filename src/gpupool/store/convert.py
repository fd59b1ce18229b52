"""Rows to read models. The only place that knows both shapes."""

from __future__ import annotations

from gpupool.domain.jobs import JobSpec, JobState, Placement, Priority
from gpupool.domain.records import JobRecord, WorkerRecord, WorkerStatus
from gpupool.store.orm import JobRow, WorkerRow


def spec_of(row: JobRow) -> JobSpec:
    return JobSpec(
        command=tuple(row.command),
        name=row.name,
        project=row.project,
        gpus=row.gpus,
        workers=row.workers,
        cpus=row.cpus,
        memory_mib=row.memory_mib,
        priority=Priority(row.priority),
        max_restarts=row.max_restarts,
        env=dict(row.env),
        workdir=row.workdir,
        gpu_model=row.gpu_model,
        max_runtime_s=row.max_runtime_s,
        gpu_memory_mib=row.gpu_memory_mib,
        checkpoint_dir=row.checkpoint_dir,
    )


def placement_of(row: WorkerRow) -> Placement:
    return Placement(
        worker=row.worker,
        node=row.node,
        gpus=tuple(row.gpus),
        gpu_share=row.gpu_share,
        gpu_memory_mib=row.gpu_memory_mib,
        cpus=tuple(row.cpus),
        memory_mib=row.memory_mib,
    )


def worker_record(row: WorkerRow) -> WorkerRecord:
    return WorkerRecord(
        id=row.id,
        job_id=row.job_id,
        attempt=row.attempt,
        placement=placement_of(row),
        status=WorkerStatus(row.status),
        handle=row.handle,
        exit_code=row.exit_code,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def job_record(row: JobRow, workers: list[WorkerRow]) -> JobRecord:
    current = sorted((w for w in workers if w.attempt == row.starts), key=lambda w: w.worker)
    return JobRecord(
        id=row.id,
        spec=spec_of(row),
        owner=row.owner,
        state=JobState(row.state),
        placements=tuple(placement_of(w) for w in current),
        reason_code=row.reason_code,
        reason=row.reason,
        exit_code=row.exit_code,
        starts=row.starts,
        restarts=row.restarts,
        preempted=row.preempted,
        cancel_requested=row.cancel_requested,
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )

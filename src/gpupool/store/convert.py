"""Rows to read models. The only place that knows both shapes."""

from __future__ import annotations

from typing import Any

from gpupool.domain.jobs import SPEC_FIELDS, JobSpec, JobState, Placement
from gpupool.domain.launch import WorkerHandle
from gpupool.domain.outcome import StopReason
from gpupool.domain.records import LIVE_WORKER_STATES, JobRecord, WorkerRecord, WorkerStatus, WorkerUsage
from gpupool.store.orm import JobRow, WorkerRow


def spec_of(row: JobRow) -> JobSpec:
    """A job row's columns for the spec are named as the spec's fields (``SPEC_FIELDS``)."""
    return JobSpec.from_dict({name: getattr(row, name) for name in SPEC_FIELDS})


def spec_columns(spec: JobSpec) -> dict[str, Any]:
    """The job row's columns for ``spec``: the inverse of ``spec_of``."""
    return spec.to_dict()


def placement_of(row: WorkerRow) -> Placement:
    return Placement(
        worker=row.worker,
        node=row.node,
        gpus=tuple(row.gpus),
        gpu_share=row.gpu_share,
        gpu_memory_mib=row.gpu_memory_mib,
        cpus=tuple(row.cpus),
        memory_mib=row.memory_mib,
        cpu_milli=row.cpu_milli,
    )


def worker_record(row: WorkerRow) -> WorkerRecord:
    return WorkerRecord(
        id=row.id,
        job_id=row.job_id,
        attempt=row.attempt,
        placement=placement_of(row),
        status=WorkerStatus(row.status),
        handle=None if row.handle is None else WorkerHandle.from_json(row.handle),
        exit_code=row.exit_code,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_reason=row.exit_reason,
    )


def job_record(row: JobRow, workers: list[WorkerRow]) -> JobRecord:
    current = sorted((w for w in workers if w.attempt == row.starts), key=lambda w: w.worker)
    if row.max_workers is not None and JobState(row.state).active:  # elastic (issue 35): where it runs now
        current = [w for w in current if w.status in LIVE_WORKER_STATES and not w.released] or current
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
        stop_reason=StopReason(row.stop_reason) if row.stop_reason else None,
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_reason=row.exit_reason,
        image_digest=row.image_digest,
        run_as=row.run_as,
        array_id=row.array_id,
        array_index=row.array_index,
        usage=tuple(usage_of(w) for w in current if w.usage_at is not None and w.status in LIVE_WORKER_STATES),
    )


def usage_of(row: WorkerRow) -> WorkerUsage:
    assert row.usage_at is not None
    return WorkerUsage(row.worker, row.memory_used_mib, row.memory_peak_mib, row.cpu_pct, row.usage_at)

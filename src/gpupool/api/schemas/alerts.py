"""Alert and idle-GPU response models."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from gpupool.domain.alerts import Alert
from gpupool.store.idle import IdleGpu


class AlertOut(BaseModel):
    id: int
    kind: str = Field(description="gpu_temperature, gpu_xid or node_down")
    node: str
    gpu: int | None = Field(description="null for a node alert")
    job_id: int | None = Field(description="the job on the GPU when it was raised")
    message: str
    value: float | None = Field(description="the reading behind it: °C, or the XID error count")
    raised_at: datetime
    updated_at: datetime | None
    cleared_at: datetime | None = Field(description="null while active")

    @classmethod
    def of(cls, a: Alert) -> AlertOut:
        return cls(
            id=a.id or 0,
            kind=a.kind.value,
            node=a.node,
            gpu=a.gpu,
            job_id=a.job_id,
            message=a.message,
            value=a.value,
            raised_at=a.raised_at,
            updated_at=a.updated_at,
            cleared_at=a.cleared_at,
        )


class IdleGpuOut(BaseModel):
    node: str
    gpu: int
    job_id: int
    job_name: str
    project: str
    owner: str
    priority: str
    idle_since: datetime = Field(description="since when its utilisation stayed below the idle threshold")
    idle_for_s: float
    utilization_pct: float = Field(description="its latest reading")

    @classmethod
    def of(cls, g: IdleGpu) -> IdleGpuOut:
        return cls(
            node=g.node,
            gpu=g.gpu,
            job_id=g.job_id,
            job_name=g.job_name,
            project=g.project,
            owner=g.owner,
            priority=g.priority,
            idle_since=g.since,
            idle_for_s=round(g.idle_for_s, 1),
            utilization_pct=g.utilization_pct,
        )

"""Project request/response models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpupool.services.projects import ProjectView


class ProjectSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    quota: float = Field(0.0, description="GPUs guaranteed to the project")
    limit: float | None = Field(None, description="most GPUs it may hold, borrowing included; null for no limit")
    weight: float = Field(1.0, description="its part of the GPUs beyond all quotas")
    idle_timeout_s: float | None = Field(
        None,
        description="preempt its interactive jobs whose GPUs sat idle this long while others wait"
        " (warned at half); null: never",
    )


class ProjectOut(BaseModel):
    name: str
    quota: float
    limit: float | None
    weight: float
    idle_timeout_s: float | None
    allocated: float
    pending: float
    pending_jobs: int
    fair_share: float
    borrowed: float
    recent_usage: float = Field(description="GPUs held on average lately (decayed over the fair-share half-life)")

    @classmethod
    def of(cls, v: ProjectView) -> ProjectOut:
        p = v.project
        return cls(
            name=p.name,
            quota=p.quota,
            limit=p.limit,
            weight=p.weight,
            idle_timeout_s=p.idle_timeout_s,
            allocated=v.allocated,
            pending=v.pending,
            pending_jobs=v.pending_jobs,
            fair_share=round(v.fair_share, 3),
            borrowed=v.borrowed,
            recent_usage=round(v.recent_usage, 3),
        )

"""Project request/response models."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.permissions import Member, ProjectRole
from gpupool.store.user_usage import UserUse
from gpupool.usecases.projects import ProjectView


class ProjectSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    quota: float | None = Field(
        None, description="GPUs guaranteed to the project; null: the sum of quota_by_model (0 without it)"
    )
    limit: float | None = Field(None, description="most GPUs it may hold, borrowing included; null for no limit")
    quota_by_model: dict[str, float] = Field(
        default_factory=dict, description="GPUs of each model guaranteed (model as --gpu-model names it)"
    )
    limit_by_model: dict[str, float] = Field(default_factory=dict, description="most GPUs of each model it may hold")
    weight: float = Field(1.0, description="its part of the GPUs beyond all quotas")
    idle_timeout_s: float | None = Field(
        None,
        description="preempt its interactive jobs whose GPUs sat idle this long while others wait"
        " (warned at half); null: never",
    )
    gpu_power: str | None = Field(
        None,
        description="its jobs' GPU power mode when they name none: max, efficient or a limit such as 400W; null: max",
    )
    user_limit: float | None = Field(
        None, description="GPUs one user's jobs may hold here at once, fractional GPUs by their share; null: no limit"
    )
    user_limits: dict[str, float | None] = Field(
        default_factory=dict, description="the same for the users named, over user_limit; null: no limit for them"
    )
    everyone: bool | None = Field(
        None,
        description="every user may submit here, member or not; null: as it was"
        " (a new project: members only; default: everyone)",
    )
    parent: str | None = Field(
        None,
        description="the organisational unit above the project (its quota holds the project's);"
        ' "" for none (a child of the root); null: as it was (a new project: none)',
    )
    lend_limit: float | None = Field(
        None, description="most GPUs of its unused quota lent to others (0 to its quota); null: all"
    )


class MemberSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: ProjectRole = Field(ProjectRole.MEMBER, description="member: own jobs; manager: every job of the project")


class MemberOut(BaseModel):
    project: str
    user: str
    role: ProjectRole
    created_at: datetime

    @classmethod
    def of(cls, m: Member) -> MemberOut:
        return cls(project=m.project, user=m.user, role=m.role, created_at=m.created_at)


class ProjectUserOut(BaseModel):
    """One user's part of a project: within a priority class, whoever used least goes first."""

    user: str
    allocated: float = Field(description="GPUs the user's jobs in the project hold now")
    recent_usage: float = Field(description="GPUs they held there on average lately (decayed like the project's)")
    pending: float = Field(description="GPUs their pending jobs there ask for")
    pending_jobs: int

    @classmethod
    def of(cls, u: UserUse) -> ProjectUserOut:
        return cls(
            user=u.user,
            allocated=u.allocated,
            recent_usage=round(u.recent_usage, 3),
            pending=u.pending,
            pending_jobs=u.pending_jobs,
        )


class ProjectOut(BaseModel):
    name: str
    quota: float
    limit: float | None
    weight: float
    idle_timeout_s: float | None
    gpu_power: str | None = Field(None, description="its jobs' GPU power mode when they name none; null: max")
    everyone: bool = Field(description="every user may submit here; else only its members")
    parent: str | None = Field(None, description="the unit above it; null: a child of the root")
    user_limit: float | None = Field(None, description="GPUs one user's jobs may hold here at once; null: no limit")
    user_limits: dict[str, float | None] = Field(
        default_factory=dict, description="per-user figures over user_limit; null: no limit for that user"
    )
    lend_limit: float | None = Field(None, description="most GPUs of its unused quota lent to others; null: all")
    quota_by_model: dict[str, float] = Field(default_factory=dict, description="GPUs of each model guaranteed")
    limit_by_model: dict[str, float] = Field(default_factory=dict, description="most GPUs of each model it may hold")
    allocated: float
    pending: float
    pending_jobs: int
    fair_share: float
    borrowed: float
    recent_usage: float = Field(description="GPUs held on average lately (decayed over the fair-share half-life)")
    users: list[ProjectUserOut] = Field(
        default_factory=list,
        description="its users, least load first: the order their jobs go in within a priority class",
    )

    @classmethod
    def of(cls, v: ProjectView) -> ProjectOut:
        p = v.project
        return cls(
            name=p.name,
            quota=p.quota,
            limit=p.limit,
            weight=p.weight,
            idle_timeout_s=p.idle_timeout_s,
            gpu_power=p.gpu_power,
            everyone=v.everyone,
            parent=p.parent,
            user_limit=p.user_limit,
            user_limits=dict(p.user_limits),
            lend_limit=p.lend_limit,
            quota_by_model=dict(p.quota_by_model),
            limit_by_model=dict(p.limit_by_model),
            allocated=v.allocated,
            pending=v.pending,
            pending_jobs=v.pending_jobs,
            fair_share=round(v.fair_share, 3),
            borrowed=v.borrowed,
            recent_usage=round(v.recent_usage, 3),
            users=[ProjectUserOut.of(u) for u in v.users],
        )

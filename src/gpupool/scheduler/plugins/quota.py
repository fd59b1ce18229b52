"""Quota check: why a job may not start now however many GPUs are free (None: it may).

``borrow``: a project may use idle GPUs beyond its quota, up to its limit; interactive and
inference jobs must fit inside the quota beside the project's other such jobs (its own train jobs
do not count: the preempt action displaces them).
``isolated``: each project is also confined to its partition, as Philly's virtual clusters were:
its own nodes where the policy gives projects nodes (``partition="nodes"``: placement then looks
only there, so the nodes bound what it holds, and a job larger than them is refused here), else
its quota in GPUs on any node."""

from __future__ import annotations

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.partition import describe
from gpupool.scheduler.session import Session


def borrow(session: Session, job: PendingJob) -> Reason | None:
    project = session.project(job.spec.project)
    held = session.allocated.get(project.name, 0.0)
    need = job.spec.total_gpus
    if project.limit is not None and held + need > project.limit + 1e-9:
        return Reason(
            ReasonCode.LIMIT,
            f"limit: project {project.name} holds {held:g} of its limit "
            f"{project.limit:g} GPUs; this job needs {need:g} more",
        )
    if session.levels is not None and (above := session.levels.limit_refusal(project.name, need, session.allocated)):
        return above  # a unit above it at its limit (issue 34)
    if session.lending is not None and (kept := session.lending.refusal(project.name, need, session.allocated)):
        return kept  # idle GPUs another project or unit does not lend (issue 34)
    if session.per_model is not None:  # every model it could land on at the project's limit for it
        models = session.demand(job).models
        if by_model := session.per_model.limit_refusal(project.name, models, need, session.cluster.models):
            return by_model
    bound = session.bound.get(project.name, 0.0)
    if job.spec.quota_bound and bound + need > project.quota + 1e-9:
        return Reason(
            ReasonCode.QUOTA,
            f"quota: {job.spec.priority.value} jobs run only inside the quota; project {project.name} holds "
            f"{bound:g} of its quota {project.quota:g} GPUs in interactive and inference jobs",
        )
    return None


def isolated(session: Session, job: PendingJob) -> Reason | None:
    project = session.project(job.spec.project)
    held = session.allocated.get(project.name, 0.0)
    need = job.spec.total_gpus
    members = session.nodes_of(project.name)
    if members is not None:
        owned = session.partition_gpus.get(project.name, 0)
        if need > owned + 1e-9:
            return Reason(
                ReasonCode.QUOTA,
                f"partition: {describe(project.name, members, owned)}; this job needs {need:g} GPUs, "
                "more than they have",
            )
        return borrow(session, job)
    if held + need > project.quota + 1e-9:
        return Reason(
            ReasonCode.QUOTA,
            f"quota: the isolated policy confines project {project.name} to its quota of {project.quota:g} GPUs; "
            f"it holds {held:g} and this job needs {need:g}",
        )
    return borrow(session, job)

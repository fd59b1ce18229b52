"""Quota check: why a job may not start now however many GPUs are free (None: it may).

``borrow``: a project may use idle GPUs beyond its quota, up to its limit (its own and its units',
which count elastic jobs' workers above their minimums: a limit caps what a project holds); interactive and
inference jobs must fit inside the quota beside the project's other such jobs (its own train jobs
do not count: the preempt action displaces them).
``isolated``: each project is also confined to its partition, as Philly's virtual clusters were:
its own nodes where the policy gives projects nodes (``partition="nodes"``: placement then looks
only there, so the nodes bound what it holds, and a job larger than them is refused here), else
its quota in GPUs on any node.

With a tree (issue 34) only leaf projects are confined, each to its own quota (or nodes); a unit
is bounded by its projects' quotas, which sum within its own, and its limit holds as under
``borrow``. With per-model quotas a project is also confined to each of them (``partition.
model_caps``): a job every model of which is full waits naming the quota, one that may land on
several is placed only on models with room; a per-model limit holds as under ``borrow``."""

from __future__ import annotations

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.partition import describe, model_caps
from gpupool.scheduler.session import Session


def borrow(session: Session, job: PendingJob) -> Reason | None:
    project = session.project(job.spec.project)
    held = session.allocated.get(project.name, 0.0)
    extras = session.extras  # elastic jobs' workers above their minimums: limits count them (issue 35)
    if extras is not None:
        held += extras.held(project.name)
    need = job.spec.total_gpus
    if project.limit is not None and held + need > project.limit + 1e-9:
        return Reason(
            ReasonCode.LIMIT,
            f"limit: project {project.name} holds {held:g} of its limit "
            f"{project.limit:g} GPUs; this job needs {need:g} more",
        )
    if session.levels is not None and (
        above := session.levels.limit_refusal(
            project.name, need, session.allocated if extras is None else extras.with_held(session.allocated)
        )
    ):
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
        return _model_refusal(session, job) or borrow(session, job)
    if held + need > project.quota + 1e-9:
        return Reason(
            ReasonCode.QUOTA,
            f"quota: the isolated policy confines project {project.name} to its quota of {project.quota:g} GPUs; "
            f"it holds {held:g} and this job needs {need:g}",
        )
    return _model_refusal(session, job) or borrow(session, job)


def _model_refusal(session: Session, job: PendingJob) -> Reason | None:
    """Why a job of a project with per-model quotas may not start under the isolated policy: every
    model it could land on is at the project's quota for it (None: some model has room)."""
    project = session.project(job.spec.project)
    if session.per_model is None or not project.quota_by_model:
        return None
    need, here = job.spec.total_gpus, session.cluster.models
    asked = session.demand(job).models
    possible = (here if asked is None else asked) & here
    caps = model_caps(project, possible)
    full = {m: cap for m, cap in caps.items() if session.per_model.held.get((project.name, m), 0.0) + need > cap + 1e-9}
    if not possible or len(full) < len(possible):
        return None
    said = "; ".join(
        f"{session.per_model.held.get((project.name, m), 0.0):g} of its {cap:g} {m}"
        f"{f' (--quota {m}={cap:g})' if m in project.quota_by_model else ''}"
        for m, cap in full.items()
    )
    return Reason(
        ReasonCode.QUOTA,
        f"quota: the isolated policy confines project {project.name} to its quota on each GPU model; it holds "
        f"{said}; this job needs {need:g} more",
    )

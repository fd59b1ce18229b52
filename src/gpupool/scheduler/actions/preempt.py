"""Preempt: inside a project, an interactive or inference job that fits its quota but not the
free GPUs displaces the project's own train jobs, most recently started first. Interactive and
inference jobs are never displaced."""

from __future__ import annotations

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.scheduler import user_limit
from gpupool.scheduler.actions import shrink
from gpupool.scheduler.session import Session
from gpupool.scheduler.victims import saying, stop_for


def run(session: Session) -> None:
    for job in session.queue:
        if not job.spec.quota_bound or session.policy_refused(job.id):  # train jobs first: most of a queue
            continue
        if user_limit.held_back(session, job):  # its owner's limit: no job is stopped for it
            continue
        # Only train jobs are preemptible, and only interactive and inference jobs get here: every
        # preemptible job of the project ranks below this one.
        candidates = session.preemptible_in(job.spec.project)
        victims, note = shrink.extras_first(  # elastic jobs' extra workers go first (issue 35)
            session,
            job,
            candidates,
            purpose="preempt",
            own_reservation=False,
        )
        if victims is None:
            continue
        why = f"preempted: {job.spec.priority.value} job {job.id} of project {job.spec.project} needs its GPUs"
        stop_for(session, job, victims, saying(why))
        session.bound[job.spec.project] = session.bound.get(job.spec.project, 0.0) + job.spec.total_gpus
        session.reasons[job.id] = Reason(
            ReasonCode.PREEMPTING,
            f"preempting {len(victims)} train job(s) of project {job.spec.project}{note}; starts when their GPUs "
            "are free"
            if victims
            else f"waiting for jobs being stopped to free their GPUs{note}",
        )

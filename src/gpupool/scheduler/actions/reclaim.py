"""Reclaim: a project below its quota with work waiting takes GPUs back from projects that
borrowed beyond theirs, preempting the fewest, most recently started over-quota train jobs,
and never taking a lender below its own quota."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import RunningJob
from gpupool.scheduler.session import Session
from gpupool.scheduler.victims import already_failed, choose_victims, stop_for


def run(session: Session) -> None:
    # Candidates per reclaiming project: built once, rebuilt only after victims change who borrows.
    candidates_of: dict[str, list[RunningJob]] = {}
    allocated = session.allocated
    for job in session.queue:
        project = session.project(job.spec.project)
        if allocated.get(project.name, 0.0) + job.spec.total_gpus > project.quota + 1e-9:
            continue  # only GPUs within the quota are taken back (most of a queue: checked first)
        if session.policy_refused(job.id):  # limit or quota: reclaim cannot help
            continue
        if already_failed(session, job, "reclaim"):
            continue
        candidates = candidates_of.get(project.name)
        if candidates is None:
            borrowing = {name for name in session.allocated if name != project.name and _borrowing(session, name)}
            candidates = candidates_of[project.name] = (
                [r for r in session.preemptible() if r.spec.project in borrowing] if borrowing else []
            )

        def keeps_quota(chosen: list[RunningJob], victim: RunningJob, _session: Session = session) -> bool:
            lender = victim.spec.project
            taken = sum(r.spec.total_gpus for r in chosen if r.spec.project == lender) + victim.spec.total_gpus
            return _session.allocated.get(lender, 0.0) - taken >= _session.project(lender).quota - 1e-9

        victims = choose_victims(session, job, candidates, keeps_quota, purpose="reclaim")
        if victims is None:
            continue
        if victims:
            candidates_of.clear()
        lenders = sorted({v.spec.project for v in victims})
        stop_for(session, job, victims, _told(project.name, job.id))
        message = (
            f"reclaim: stopping {len(victims)} job(s) of {', '.join(lenders)} that borrowed beyond "
            f"quota; starts when their GPUs are free"
            if victims
            else "reclaim: waiting for jobs being stopped to free their GPUs"
        )
        session.reasons[job.id] = Reason(ReasonCode.RECLAIM, message)


def _told(borrower: str, job_id: int) -> Callable[[RunningJob], str]:
    """What each victim is told: whose quota it gave way to."""
    return lambda victim: (
        f"preempted: project {victim.spec.project} borrowed beyond its quota and project "
        f"{borrower} reclaims GPUs for job {job_id}"
    )


def _borrowing(session: Session, name: str) -> bool:
    return session.allocated.get(name, 0.0) > session.project(name).quota + 1e-9

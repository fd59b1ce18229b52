"""Fair reclaim (issue 34, opt-in ``gpupool up --fair-reclaim``): beyond quotas, a project that
holds more than its fair share gives GPUs back to one that holds less and waits, so fair share is
enforced, not only used to order the queue (KAI #1934).

Bounded like displace: only checkpointed jobs (``--checkpoint-dir``: they resume, losing little)
are stopped, only once they have run ``--reclaim-min-run`` in their current run, and never so many
that their project drops below its fair share; the waiting job's project must stay within its own
share once it starts, so GPUs never go back and forth. Under the fair-share queue order the
waiting job's project must also come before the holder's in the next cycle (as displace asks), or
the holder's own waiting jobs would retake the GPUs. Run by reclaim, after the quota claims.

To bound a cycle's work the first ``TRIES`` waiting jobs that could use a victim are tried."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler.fair_share import rank_holding
from gpupool.scheduler.session import Session
from gpupool.scheduler.victims import already_failed, choose_victims, stop_for

TRIES = 64
EPS = 1e-9
PURPOSE = "fair-reclaim"


def run(session: Session) -> None:
    if not session.config.fair_reclaim:
        return
    shares, allocated = session.shares, session.allocated
    known: dict[str, list[RunningJob]] = {}  # candidates by waiting project, until victims change who holds what
    tries = 0
    for job in session.queue:
        name, need = job.spec.project, job.spec.total_gpus
        if tries >= TRIES:
            break
        if job.id in session.reasons or job.spec.quota_bound:  # refused, promised GPUs, or behind the reservation
            continue
        if allocated.get(name, 0.0) + need > shares.get(name, 0.0) + EPS or already_failed(session, job, PURPOSE):
            continue  # it would hold beyond its own fair share: nothing to claim
        key = name if session.levels is None else f"{name}\0{need!r}"  # in a tree, who may give depends on need
        candidates = known.get(key)
        if candidates is None:
            candidates = known[key] = _candidates(session, name, need)
        if not candidates:
            continue
        tries += 1
        grown = [r for r in candidates if _ran_enough(session, r)]
        victims = choose_victims(session, job, grown, _fair(session, job), purpose=PURPOSE)
        if victims is None:
            _wake_when_grown(session, candidates, grown)
            continue
        known.clear()
        stop_for(session, job, victims, _told(session, name, job.id))
        holders = ", ".join(sorted({v.spec.project for v in victims}))
        session.reasons[job.id] = Reason(
            ReasonCode.RECLAIM,
            f"reclaim: stopping {len(victims)} checkpointed job(s) of {holders}, beyond its fair share, for project"
            f" {name}, below its own; starts when their GPUs are free"
            if victims
            else "reclaim: waiting for jobs being stopped to free their GPUs",
        )


def _candidates(session: Session, name: str, need: float) -> list[RunningJob]:
    """The checkpointed train jobs of the projects holding beyond their fair share, youngest first.

    In a tree shares are compared where they are split: between the two branches at the level
    where the claimant's path and the holder's meet. The holder's branch must hold beyond its
    share there, and every level of the claimant's side below it must stay within its own once
    the job starts (so a project does not claim for a unit that already holds its part)."""
    shares, allocated, levels = session.shares, session.allocated, session.levels
    if levels is None:
        holders = {other for other, held in allocated.items() if other != name and held > shares.get(other, 0.0) + EPS}
    else:
        held = levels.held_all(allocated)
        holders = set()
        for other in allocated:
            mine, theirs = levels.apart(name, other)
            if not theirs or held.get(theirs[-1], 0.0) <= shares.get(theirs[-1], 0.0) + EPS:
                continue
            if all(held.get(level, 0.0) + need <= shares.get(level, 0.0) + EPS for level in mine):
                holders.add(other)
    if not holders:
        return []
    return [r for r in session.preemptible() if r.spec.project in holders and r.spec.checkpoint_dir is not None]


def _fair(session: Session, job: PendingJob) -> Callable[[list[RunningJob], RunningJob], bool]:
    project, shares, recent = job.spec.project, session.shares, session.snapshot.recent_usage
    ranked = session.config.queue_order == "fair_share"
    mine = rank_holding(shares, recent, project, session.allocated.get(project, 0.0))

    levels = session.levels
    held = levels.held_all(session.allocated) if levels is not None else session.allocated

    def allowed(chosen: list[RunningJob], victim: RunningJob) -> bool:
        holder = victim.spec.project
        taken = sum(r.spec.total_gpus for r in chosen if r.spec.project == holder) + victim.spec.total_gpus
        left = session.allocated.get(holder, 0.0) - taken
        if left < shares.get(holder, 0.0) - EPS:
            return False  # never below the holder's fair share
        if levels is not None:  # nor any level of its side below where the two paths meet
            gone = [*chosen, victim]
            for level in levels.apart(project, holder)[1][1:]:
                out = sum(r.spec.total_gpus for r in gone if level in levels.units_of(r.spec.project))
                if held.get(level, 0.0) - out < shares.get(level, 0.0) - EPS:
                    return False
        return not (ranked and rank_holding(shares, recent, holder, left) < mine)

    return allowed


def _told(session: Session, claimant: str, job_id: int) -> Callable[[RunningJob], str]:
    def why(victim: RunningJob) -> str:
        holder = victim.spec.project
        return (
            f"preempted: project {holder} held beyond its fair share of {session.shares.get(holder, 0.0):g} GPUs"
            f" and project {claimant}, below its own, reclaims GPUs for job {job_id} (--fair-reclaim)"
        )

    return why


def _ran_enough(session: Session, job: RunningJob) -> bool:
    """Run the minimum in its current run; one still starting has lost no work yet."""
    if job.started_at is None:
        return True
    return (session.snapshot.now - job.started_at).total_seconds() >= session.config.reclaim_min_run_s


def _wake_when_grown(session: Session, candidates: list[RunningJob], grown: list[RunningJob]) -> None:
    """Young candidates may make room once they have run the minimum: a cycle runs by then."""
    if len(grown) == len(candidates):
        return
    young = [r.started_at for r in candidates if r.started_at is not None and not _ran_enough(session, r)]
    if young:
        wake = min(young) + timedelta(seconds=session.config.reclaim_min_run_s)
        session.wake_at = wake if session.wake_at is None else min(session.wake_at, wake)

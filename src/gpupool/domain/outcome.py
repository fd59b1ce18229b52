"""What a job's worker exits mean for the job: a pure rule the controller applies.

A gang lives and dies whole: one failed (or lost) worker stops the others, and the job is
requeued whole while restarts remain.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain.records import WorkerRecord, WorkerStatus


class Verdict(enum.StrEnum):
    WAIT = "wait"  # workers still running normally
    STOP_REST = "stop_rest"  # one failed or a cancel was asked: stop the others first
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REQUEUE = "requeue"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: Verdict
    exit_code: int | None
    message: str
    lost: str = ""  # set when a lost worker ends the attempt: the job is ``lost`` before requeue or failure


def judge(
    workers: Sequence[WorkerRecord],
    *,
    cancel_requested: bool,
    restarts: int,
    max_restarts: int,
    preempt_requested: bool = False,
) -> Outcome:
    live = [w for w in workers if w.status.holds_resources]
    ended = sorted(
        (w for w in workers if not w.status.holds_resources),
        key=lambda w: (w.finished_at is None, w.finished_at, w.placement.worker),
    )
    bad = [w for w in ended if w.status is WorkerStatus.LOST or w.exit_code != 0]
    first_bad = bad[0] if bad else None
    code = first_bad.exit_code if first_bad else None
    if cancel_requested:
        if live:
            return Outcome(Verdict.STOP_REST, code, "stopping workers for cancel")
        return Outcome(Verdict.CANCELLED, code, "cancelled; all workers stopped")
    if preempt_requested:
        if live:
            return Outcome(Verdict.STOP_REST, code, "stopping workers for preemption")
        return Outcome(Verdict.PREEMPTED, code, "preempted; requeued with its restart count kept")
    if first_bad is not None:
        where = f"worker {first_bad.placement.worker} on {first_bad.placement.node}"
        what = f"{where} was lost" if first_bad.status is WorkerStatus.LOST else f"{where} exited with code {code}"
        if live:
            return Outcome(Verdict.STOP_REST, code, f"{what}; stopping the other workers of the gang")
        lost = what if first_bad.status is WorkerStatus.LOST else ""
        if restarts < max_restarts:
            return Outcome(Verdict.REQUEUE, code, f"{what}; requeued (restart {restarts + 1} of {max_restarts})", lost)
        if lost:
            return Outcome(Verdict.FAILED, code, f"{what}; no restarts left", lost)
        return Outcome(Verdict.FAILED, code, f"{what}" + ("; no restarts left" if max_restarts else ""))
    if live:
        return Outcome(Verdict.WAIT, None, "")
    return Outcome(Verdict.SUCCEEDED, 0, "all workers exited with code 0")

"""How a job stops: one stop reason, and one pure rule from (job, its workers' exits, the stop
reason) to what happens next.

A job is stopped for one reason at a time (``StopReason``), kept in one field beside its state.
Before this, four flags (cancel requested, preempt requested, timed out, preempted) were set in
the store, judged here and overridden by hand in the monitor, and could disagree. Now the store
records the reason, ``settle`` decides, and the store applies the ``Settlement`` it returns.

A gang lives and dies whole: one failed (or lost) worker stops the others, and the job is
requeued whole while restarts remain. An elastic job (issue 35) runs on without a worker other
than worker 0 that fails while it keeps at least its minimum and has restarts left (each such
failure counts one); a worker its shrink stopped, or one it ran on without, is not judged again.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpupool.domain import exit_reasons
from gpupool.domain.durations import format_duration
from gpupool.domain.jobs import JobState, StopReason, may_replace
from gpupool.domain.records import WorkerRecord, WorkerStatus

__all__ = [
    "ImageWait",
    "JobFacts",
    "Outcome",
    "Settlement",
    "Step",
    "StopReason",
    "Verdict",
    "judge",
    "may_replace",
    "settle",
]


class Verdict(enum.StrEnum):
    WAIT = "wait"  # workers still running normally
    STOP_REST = "stop_rest"  # one failed or a stop was asked: stop the others first
    RUN_ON = "run_on"  # an elastic job's extra worker failed: it runs on without it, a restart counted
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
    exit_reason: str | None = None  # of the first worker that failed, when its node knows why
    waits_for_image: bool = False  # requeued because a node could not get its image now: no restart counted
    released: tuple[int, ...] = ()  # RUN_ON: the failed workers (ids) the job runs on without
    charged: int = 0  # RUN_ON: the restarts they cost (a worker that could not get its image: none)


@dataclass(frozen=True, slots=True)
class ImageWait:
    """How long a job has waited for an image no node could get now, and how long it may.

    A registry down for minutes should not fail jobs, nor a mistyped path keep one pending for
    days: past ``limit_s`` (``gpupool up --image-wait``) the next exit for want of the image
    fails the job instead of requeueing it once more."""

    image: str
    waited_s: float  # since the first exit of this wait (its attempts in a row that could not get it)
    last: str  # the node's latest sentence on why
    limit_s: float | None  # None: it waits for ever; 0: it never waits

    @property
    def over(self) -> bool:
        return self.limit_s is not None and self.waited_s >= self.limit_s

    def gave_up(self) -> str:
        if not self.limit_s:
            return f"could not get image {self.image} (last: {self.last}); gave up at once (gpupool up --image-wait 0)"
        return (
            f"could not get image {self.image} for {format_duration(self.waited_s)} (last: {self.last});"
            f" gave up (gpupool up --image-wait {format_duration(self.limit_s)})"
        )


def judge(
    workers: Sequence[WorkerRecord],
    *,
    stop: StopReason | None,
    restarts: int,
    max_restarts: int,
    image_wait: ImageWait | None = None,
    least: int | None = None,
    released: Collection[int] = (),
) -> Outcome:
    """What the workers' exits mean, given the stop under way (and, where a node could not get
    the job's image now, how long it has waited for it). ``least``: an elastic job's minimum
    (None: a rigid gang); ``released``: the workers (ids) it runs on without, whose exits are not its."""
    live = [w for w in workers if w.status.holds_resources]
    ended = sorted(
        (w for w in workers if not w.status.holds_resources),
        key=lambda w: (w.finished_at is None, w.finished_at, w.placement.worker),
    )
    bad = [w for w in ended if w.id not in released and (w.status is WorkerStatus.LOST or w.exit_code != 0)]
    first_bad = bad[0] if bad else None
    code = first_bad.exit_code if first_bad else None
    why = first_bad.exit_reason if first_bad else None
    if stop is not None:
        return _stopped(stop, bool(live), code)
    if first_bad is not None:
        what = _failure(first_bad)
        if (runs_on := _run_on(bad, live, released, least, restarts, max_restarts)) is not None:
            return runs_on
        if live:
            return Outcome(Verdict.STOP_REST, code, f"{what}; stopping the other workers of the gang")
        lost = what if first_bad.status is WorkerStatus.LOST else ""
        if why == exit_reasons.IMAGE_UNAVAILABLE and image_wait is not None and image_wait.over:
            return Outcome(Verdict.FAILED, code, image_wait.gave_up(), exit_reason=exit_reasons.IMAGE)
        if why == exit_reasons.IMAGE_UNAVAILABLE:  # not the job's failure: it waits, however many restarts
            return Outcome(
                Verdict.REQUEUE, code, f"{what}; it waits for its image", exit_reason=why, waits_for_image=True
            )
        if restarts < max_restarts:
            requeued = f"{what}; requeued (restart {restarts + 1} of {max_restarts})"
            return Outcome(Verdict.REQUEUE, code, requeued, lost, exit_reason=why)
        if lost:
            return Outcome(Verdict.FAILED, code, f"{what}; no restarts left", lost, exit_reason=why)
        no_more = "; no restarts left" if max_restarts else ""
        return Outcome(Verdict.FAILED, code, what + no_more, exit_reason=why)
    if live:
        return Outcome(Verdict.WAIT, None, "")
    return Outcome(Verdict.SUCCEEDED, 0, "all workers exited with code 0")


def _stopped(stop: StopReason, live: bool, code: int | None) -> Outcome:
    """A stop under way: its live workers stopped first, then the job cancelled or preempted."""
    if stop.ends_job:
        if live:
            return Outcome(Verdict.STOP_REST, code, "stopping workers for cancel")
        return Outcome(Verdict.CANCELLED, code, "cancelled; all workers stopped")
    if live:
        return Outcome(Verdict.STOP_REST, code, "stopping workers for preemption")
    return Outcome(Verdict.PREEMPTED, code, "preempted; requeued with its restart count kept")


def _failure(w: WorkerRecord) -> str:
    where = f"worker {w.placement.worker} on {w.placement.node}"
    what = f"{where} was lost" if w.status is WorkerStatus.LOST else f"{where} exited with code {w.exit_code}"
    return what + (f" ({exit_reasons.MEANING[w.exit_reason]})" if w.exit_reason in exit_reasons.MEANING else "")


def _run_on(
    bad: Sequence[WorkerRecord],
    live: Sequence[WorkerRecord],
    released: Collection[int],
    least: int | None,
    restarts: int,
    max_restarts: int,
) -> Outcome | None:
    """An elastic job runs on without its failed workers when none is worker 0 (it hosts the
    rendezvous), the workers it keeps are at least its minimum, and it has a restart left for each;
    None: it does not (or it is a rigid gang), and fails or is requeued whole."""
    kept = sum(1 for w in live if w.id not in released)
    # A worker whose node could not get the image is not the job's failure (as for a gang): no restart.
    charged = sum(1 for w in bad if w.exit_reason != exit_reasons.IMAGE_UNAVAILABLE)
    count = restarts + charged
    if least is None or any(w.placement.worker == 0 for w in bad) or kept < least or count > max_restarts:
        return None
    failed = "; ".join(_failure(w) for w in bad)
    cost = f"restart {count} of {max_restarts}" if charged else "its image was not to be had there: no restart"
    message = f"{failed}; it runs on with {kept} workers ({cost})"
    return Outcome(
        Verdict.RUN_ON,
        bad[0].exit_code,
        message,
        exit_reason=bad[0].exit_reason,
        released=tuple(w.id for w in bad),
        charged=charged,
    )


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What ``settle`` needs to know of a job, read in the transaction that applies its answer."""

    id: int
    state: JobState
    stop: StopReason | None
    restarts: int
    max_restarts: int
    max_runtime_s: int | None
    exit_code: int | None
    exit_reason: str | None = None
    image_wait: ImageWait | None = None  # where its attempt ended for an image a node could not get now
    least: int | None = None  # an elastic job's minimum (issue 35); None: a rigid gang
    released: frozenset[int] = frozenset()  # the workers (ids) it runs on without: shrunk or failed


@dataclass(frozen=True, slots=True)
class Step:
    """One transition, in order: ``kind`` names the event where the state alone says less."""

    state: JobState
    message: str
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to do with a job: stop these live workers first, or walk these transitions and set
    the restart count and exit code. The stop reason stays as it is: it says why it ended."""

    stop_workers: tuple[WorkerRecord, ...] = ()
    steps: tuple[Step, ...] = ()
    restarts: int = 0
    exit_code: int | None = None
    exit_reason: str | None = None
    waits_for_image: bool = False  # requeued until a node can get its image (``store.jobs`` defers it)
    released: tuple[int, ...] = ()  # workers (ids) the job runs on without from now on (issue 35)
    note: str = ""  # an event to record where no transition says what happened (an elastic job ran on)


_VERDICT_STATE = {
    Verdict.SUCCEEDED: JobState.SUCCEEDED,
    Verdict.FAILED: JobState.FAILED,
    Verdict.CANCELLED: JobState.CANCELLED,
    Verdict.REQUEUE: JobState.PENDING,
    Verdict.PREEMPTED: JobState.PREEMPTED,
}


def settle(job: JobFacts, workers: Sequence[WorkerRecord]) -> Settlement | None:
    """The next move of a starting or running job: None while it runs normally."""
    outcome = judge(
        workers,
        stop=job.stop,
        restarts=job.restarts,
        max_restarts=job.max_restarts,
        image_wait=job.image_wait,
        least=job.least,
        released=job.released,
    )
    if outcome.verdict is Verdict.WAIT:
        # Workers a shrink stopped that still run are stopped again (the applier sends each one
        # SIGTERM once): a head that restarted between the shrink and its SIGTERM still sends it.
        leaving = tuple(w for w in workers if w.status.holds_resources and w.id in job.released)
        if not leaving:
            return None
        return Settlement(
            stop_workers=leaving, restarts=job.restarts, exit_code=job.exit_code, exit_reason=job.exit_reason
        )
    if outcome.verdict is Verdict.RUN_ON:
        return Settlement(
            restarts=job.restarts + outcome.charged,
            exit_code=job.exit_code,
            exit_reason=job.exit_reason,
            released=outcome.released,
            note=outcome.message,
        )
    if outcome.verdict is Verdict.STOP_REST:
        live = tuple(w for w in workers if w.status.holds_resources)
        return Settlement(
            stop_workers=live, restarts=job.restarts, exit_code=job.exit_code, exit_reason=job.exit_reason
        )
    steps: list[Step] = []
    if job.state is JobState.STARTING:
        steps.append(Step(JobState.RUNNING, "running"))
    target = _VERDICT_STATE[outcome.verdict]
    message = outcome.message
    if outcome.verdict is Verdict.CANCELLED and job.stop is StopReason.TIMEOUT:
        target = JobState.FAILED
        message = f"stopped after its max runtime of {job.max_runtime_s}s"
    restarts = job.restarts + 1 if outcome.verdict is Verdict.REQUEUE and not outcome.waits_for_image else job.restarts
    exit_code = job.exit_code if target is JobState.PENDING else outcome.exit_code
    exit_reason = job.exit_reason if target is JobState.PENDING else outcome.exit_reason
    if outcome.lost:  # its node died or its supervisor vanished: lost, then requeued or failed
        steps.append(Step(JobState.LOST, f"job lost: {outcome.lost}"))
    steps.append(Step(target, message, "requeued" if target is JobState.PENDING else None))
    if target is JobState.PREEMPTED:
        requeued = (
            f"requeued after preemption (restarts stay {restarts} of {job.max_restarts}: a preemption does not count)"
        )
        steps.append(Step(JobState.PENDING, requeued, "requeued"))
    return Settlement(
        steps=tuple(steps),
        restarts=restarts,
        exit_code=exit_code,
        exit_reason=exit_reason,
        waits_for_image=outcome.waits_for_image,
    )


RESTART_BACKOFF_CAP_S = 300.0  # the longest a failed job waits before its next attempt (Kubernetes' 5 minutes)
CRASH_RESET_S = 600.0  # an attempt that ran this long before it failed starts the doubling over


def restart_delay(failures: int, base_s: float, cap_s: float = RESTART_BACKOFF_CAP_S) -> float:
    """How long a job waits after ``failures`` failures in a row (attempts that each ended within
    ``CRASH_RESET_S`` of their start, the last one included): ``base_s`` after the first, doubling
    with each one after, never more than ``cap_s`` (0: no back-off), as Kubernetes' CrashLoopBackOff,
    so a job or replica that fails at once cannot restart dozens of times a minute, while one that
    ran for long and failed once starts again soon."""
    if base_s <= 0 or failures <= 0:
        return 0.0
    return min(cap_s, base_s * 2.0 ** min(failures - 1, 30))


def failures_in_a_row(runs_s: Sequence[float | None]) -> int:
    """How many of the latest attempts (newest first, each how long it ran; None: it never ran)
    ended within ``CRASH_RESET_S``: the streak ``restart_delay`` doubles over."""
    streak = 0
    for ran in runs_s:
        if ran is not None and ran >= CRASH_RESET_S:
            break
        streak += 1
    return streak

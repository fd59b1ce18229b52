"""The one rule of how a job stops: (job, its workers' exits, the stop reason) -> next moves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain import exit_reasons
from gpupool.domain.jobs import JobState, StopReason, may_replace
from gpupool.domain.outcome import ImageWait, JobFacts, settle
from tests.support.builders import E, L, R, workers

C, T, P, IDLE = StopReason.CANCEL, StopReason.TIMEOUT, StopReason.PREEMPT, StopReason.IDLE
S = JobState


@pytest.mark.parametrize(
    ("current", "new", "replaces"),
    [
        (None, C, True),
        (None, P, True),
        (P, C, True),  # ending a job outranks requeueing it
        (IDLE, T, True),
        (C, T, False),  # a cancelled job is not turned into a timed-out one
        (T, C, False),
        (P, IDLE, False),  # nor a job being preempted preempted twice
        (P, P, False),
        (C, P, False),
    ],
)
def test_which_stop_outranks_which(current: StopReason | None, new: StopReason, replaces: bool) -> None:
    assert may_replace(current, new) is replaces


def facts(
    state: JobState = S.RUNNING, stop: StopReason | None = None, restarts: int = 0, max_restarts: int = 0
) -> JobFacts:
    return JobFacts(1, state, stop, restarts, max_restarts, max_runtime_s=60, exit_code=None)


@pytest.mark.parametrize(
    ("job", "states", "steps", "restarts", "exit_code"),
    [
        (facts(), [(E, 0), (E, 0)], [S.SUCCEEDED], 0, 0),
        (facts(S.STARTING), [(E, 0)], [S.RUNNING, S.SUCCEEDED], 0, 0),
        (facts(), [(E, 3)], [S.FAILED], 0, 3),
        (facts(max_restarts=2), [(E, 3)], [S.PENDING], 1, None),
        (facts(max_restarts=2), [(L, None)], [S.LOST, S.PENDING], 1, None),
        (facts(), [(L, None)], [S.LOST, S.FAILED], 0, None),
        (facts(stop=C), [(E, 143)], [S.CANCELLED], 0, 143),
        (facts(stop=T), [(E, 143)], [S.FAILED], 0, 143),
        (facts(stop=P, restarts=1, max_restarts=3), [(E, 143)], [S.PREEMPTED, S.PENDING], 1, 143),
        (facts(stop=IDLE), [(E, 143), (E, 143)], [S.PREEMPTED, S.PENDING], 0, 143),
    ],
)
def test_settle_walks_the_transitions(
    job: JobFacts, states: list, steps: list[JobState], restarts: int, exit_code: int | None
) -> None:
    plan = settle(job, workers(*states))
    assert plan is not None and plan.stop_workers == ()
    assert [s.state for s in plan.steps] == steps
    assert (plan.restarts, plan.exit_code) == (restarts, exit_code)


def test_timeout_and_requeue_say_why() -> None:
    timed_out = settle(facts(stop=T), workers((E, 143)))
    assert timed_out is not None and timed_out.steps[-1].message == "stopped after its max runtime of 60s"
    preempted = settle(facts(stop=P, restarts=1, max_restarts=3), workers((E, 143)))
    assert preempted is not None and [s.kind for s in preempted.steps] == [None, "requeued"]
    assert "restarts stay 1 of 3" in preempted.steps[-1].message


@pytest.mark.parametrize("stop", [None, C, T, P, IDLE])
def test_live_workers_are_stopped_first_whatever_the_reason(stop: StopReason | None) -> None:
    gang = workers((E, 1) if stop is None else (R, None), (R, None))
    plan = settle(facts(stop=stop), gang)
    assert plan is not None and plan.steps == ()
    assert [w.placement.worker for w in plan.stop_workers] == ([1] if stop is None else [0, 1])


def test_a_running_job_with_no_stop_and_live_workers_is_left_alone() -> None:
    assert settle(facts(), workers((R, None), (E, 0))) is None


def test_an_out_of_memory_kill_is_the_reason_the_job_gives_and_a_requeue_forgets_it() -> None:
    """The node says why a worker was killed (``oom``): the job that fails of it says so, a
    requeued one keeps the reason of its last end until it ends again, another failure has none."""
    oom = [replace(w, exit_reason="oom") if w.placement.worker == 1 else w for w in workers((E, 0), (E, 137))]
    failed = settle(facts(), oom)
    assert failed is not None and (failed.exit_code, failed.exit_reason) == (137, "oom")
    assert "out of memory" in failed.steps[-1].message
    requeued = settle(replace(facts(max_restarts=1), exit_code=1, exit_reason=None), oom)
    assert requeued is not None and requeued.steps[-1].state is S.PENDING
    assert (requeued.exit_code, requeued.exit_reason) == (1, None)
    plain = settle(facts(), workers((E, 3)))
    assert plain is not None and plain.exit_reason is None and "memory" not in plain.steps[-1].message


@pytest.mark.parametrize(("restarts", "max_restarts"), [(0, 0), (2, 2), (0, 3)])
def test_a_job_whose_image_a_node_cannot_get_now_waits_without_using_a_restart(
    restarts: int, max_restarts: int
) -> None:
    unavailable = [replace(w, exit_reason=exit_reasons.IMAGE_UNAVAILABLE) for w in workers((E, 125))]
    plan = settle(facts(S.STARTING, restarts=restarts, max_restarts=max_restarts), unavailable)
    assert plan is not None and plan.waits_for_image
    assert [s.state for s in plan.steps] == [S.RUNNING, S.PENDING] and plan.restarts == restarts
    assert plan.steps[-1].message.endswith("it waits for its image")
    broken = [replace(w, exit_reason=exit_reasons.IMAGE) for w in workers((E, 125))]
    failed = settle(facts(S.STARTING), broken)  # a broken image: the job fails, as any failure with no restarts
    assert failed is not None and not failed.waits_for_image and failed.steps[-1].state is S.FAILED


REF = "registry.example/team/train:1"


@pytest.mark.parametrize(
    ("waited_s", "limit_s", "gives_up"),
    [
        (0.0, 3600.0, False),  # the first exit of a wait: tried again in a minute
        (3599.0, 3600.0, False),
        (3600.0, 3600.0, True),  # waited its --image-wait: the next exit fails it
        (86400.0, None, False),  # no bound (a controller built without one): it waits for ever
        (0.0, 0.0, True),  # --image-wait 0: never waits
    ],
)
def test_a_job_waits_for_its_image_only_as_long_as_the_head_allows(
    waited_s: float, limit_s: float | None, gives_up: bool
) -> None:
    unavailable = [replace(w, exit_reason=exit_reasons.IMAGE_UNAVAILABLE) for w in workers((E, 125))]
    wait = ImageWait(REF, waited_s, "registry.example did not answer, on n", limit_s)
    plan = settle(replace(facts(S.STARTING, restarts=1, max_restarts=3), image_wait=wait), unavailable)
    assert plan is not None and plan.restarts == 1  # neither way uses a restart
    if not gives_up:
        assert plan.waits_for_image and [s.state for s in plan.steps] == [S.RUNNING, S.PENDING]
        assert (plan.exit_code, plan.exit_reason) == (None, None)  # a pending job keeps those of its last end
        return
    assert not plan.waits_for_image and [s.state for s in plan.steps] == [S.RUNNING, S.FAILED]
    assert (plan.exit_code, plan.exit_reason) == (125, exit_reasons.IMAGE)
    said = plan.steps[-1].message
    assert said.startswith(f"could not get image {REF}") and "(last: registry.example did not answer, on n)" in said
    if limit_s:
        assert " for 60m " in said and said.endswith("gave up (gpupool up --image-wait 60m)")
    else:
        assert said.endswith("gave up at once (gpupool up --image-wait 0)")


def test_the_image_bound_applies_only_to_an_exit_for_want_of_the_image() -> None:
    over = ImageWait(REF, 7200.0, "not there", 3600.0)
    failed = [replace(w, exit_reason=None) for w in workers((E, 1))]
    plan = settle(replace(facts(max_restarts=2), image_wait=over), failed)  # its own failure: a restart, as ever
    assert plan is not None and plan.restarts == 1 and plan.steps[-1].state is S.PENDING

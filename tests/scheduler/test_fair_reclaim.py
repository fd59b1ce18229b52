"""Fair reclaim (issue 34 item 5, opt-in ``--fair-reclaim``): beyond quotas, a project above its
fair share gives checkpointed jobs that ran the minimum back to one below it that waits, never
going below its own share. Scenarios on a fake clock (the snapshot's ``now``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import RunningJob
from gpupool.scheduler import SchedulerConfig, schedule
from gpupool.scheduler.policies import preset
from tests.support.builders import T0, node, pending, running, snapshot

NODES = [node("n1", 8), node("n2", 8)]  # 16 GPUs
# No quotas: every GPU is beyond them, shared by weight: vision 4, nlp 4, default 8.
PROJECTS = [Project("vision", weight=1), Project("nlp", weight=1), Project("default", weight=2)]
ON = replace(preset("fifo-share"), fair_reclaim=True)  # (no displace: only fair reclaim stops jobs here)
HOUR = timedelta(hours=1)


def _held(held: dict[str, int], *, checkpointed: bool = True, ran: timedelta = 2 * HOUR) -> list[RunningJob]:
    """1-GPU running jobs filling n1 then n2, ids 100 up, vision's checkpointed, started ``ran`` ago."""
    jobs, slot = [], 0
    for owner, n in held.items():
        for _ in range(n):
            job = running(100 + slot, (f"n{1 + slot // 8}", (slot % 8,)), project=owner)
            ckpt = "/ckpt" if checkpointed and owner == "vision" else None
            jobs.append(replace(job, spec=replace(job.spec, checkpoint_dir=ckpt), started_at=T0 - ran))
            slot += 1
    return jobs


def _nlp_waits(count: int) -> list:  # type: ignore[type-arg]
    return [pending(i, project="nlp") for i in range(1, count + 1)]


def test_off_by_default_nothing_is_taken_back_beyond_quotas() -> None:
    result = schedule(
        snapshot(NODES, _nlp_waits(6), _held({"vision": 12, "default": 4}), PROJECTS), preset("fifo-share")
    )
    assert not result.preemptions and not result.starts


def test_a_project_above_its_share_gives_back_to_one_below_it_that_waits() -> None:
    result = schedule(snapshot(NODES, _nlp_waits(6), _held({"vision": 12, "default": 4}), PROJECTS), ON)
    # nlp's share is 4: four of its jobs claim one of vision's each; the fifth would take it beyond.
    assert len(result.preemptions) == 4
    assert {p.for_job for p in result.preemptions} == {1, 2, 3, 4}
    assert result.pending[1].code is ReasonCode.RECLAIM
    assert result.pending[1].message == (
        "reclaim: stopping 1 checkpointed job(s) of vision, beyond its fair share, for project nlp,"
        " below its own; starts when their GPUs are free"
    )
    assert result.preemptions[0].message == (
        "preempted: project vision held beyond its fair share of 4 GPUs and project nlp, below its own,"
        " reclaims GPUs for job 1 (--fair-reclaim)"
    )
    assert result.pending[5].code is not ReasonCode.RECLAIM


def test_never_below_the_holders_fair_share() -> None:
    # vision holds 6 of its share 4: 2 come back; default's 10 are not checkpointed.
    result = schedule(snapshot(NODES, _nlp_waits(4), _held({"vision": 6, "default": 10}), PROJECTS), ON)
    assert len(result.preemptions) == 2


def test_only_checkpointed_jobs_are_taken_back() -> None:
    running_jobs = _held({"vision": 12, "default": 4}, checkpointed=False)
    assert not schedule(snapshot(NODES, _nlp_waits(6), running_jobs, PROJECTS), ON).preemptions


def test_only_after_the_minimum_run_and_a_cycle_runs_when_it_is_reached() -> None:
    config = replace(ON, reclaim_min_run_s=600)
    running_jobs = _held({"vision": 12, "default": 4}, ran=timedelta(minutes=4))
    first = schedule(snapshot(NODES, _nlp_waits(2), running_jobs, PROJECTS), config)
    assert not first.preemptions
    assert first.wake_at == T0 + timedelta(minutes=6)
    later = replace(snapshot(NODES, _nlp_waits(2), running_jobs, PROJECTS), now=T0 + timedelta(minutes=6))
    assert len(schedule(later, config).preemptions) == 2


def test_the_gpus_taken_back_go_to_the_waiting_project_next_cycle() -> None:
    running_jobs = _held({"vision": 12, "default": 4})
    first = schedule(snapshot(NODES, _nlp_waits(6), running_jobs, PROJECTS), ON)
    stopped = {p.job_id for p in first.preemptions}
    # The victims are gone and requeued behind nlp's jobs: nlp, furthest below its share, goes first.
    requeued = [pending(j, project="vision", at=-1) for j in sorted(stopped)]
    left = [r for r in running_jobs if r.id not in stopped]
    second = schedule(snapshot(NODES, [*_nlp_waits(6), *requeued], left, PROJECTS), ON)
    assert sorted(s.job_id for s in second.starts) == [1, 2, 3, 4]
    assert not second.preemptions  # nlp at its share now: no more claims, and nothing goes back


def test_within_quotas_the_ordinary_reclaim_comes_first() -> None:
    projects = [Project("vision", quota=2), Project("nlp", quota=2), Project("default", quota=0, weight=2)]
    # nlp is below its quota: the ordinary reclaim takes vision's borrowed jobs, checkpointed or not.
    running_jobs = _held({"vision": 12, "default": 4}, checkpointed=False)
    result = schedule(snapshot(NODES, _nlp_waits(6), running_jobs, projects), ON)
    assert len(result.preemptions) == 2
    assert "borrowed beyond quota" in result.pending[1].message


def test_with_displace_no_job_is_stopped_twice() -> None:
    config = SchedulerConfig(fair_reclaim=True)  # the default policy: displace runs after reclaim
    result = schedule(snapshot(NODES, _nlp_waits(6), _held({"vision": 12, "default": 4}), PROJECTS), config)
    stopped = [p.job_id for p in result.preemptions]
    assert len(stopped) == len(set(stopped)) >= 4


# A tree (issue 34), shares by weight beyond no quotas: default 8, lab 4, cs 2 (vision 1, nlp 1),
# bio 2 (genome 1, protein 1) of 16 GPUs.
TREE = [
    Project("default", weight=4),
    Project("lab", weight=2),
    Project("cs", weight=1),
    Project("bio", weight=1),
    Project("vision", parent="cs"),
    Project("nlp", parent="cs"),
    Project("genome", parent="bio"),
    Project("protein", parent="bio"),
]


def _tree_held(held: dict[str, int]) -> list[RunningJob]:
    """Checkpointed 1-GPU jobs filling n1 then n2, ids 100 up; later projects' jobs are younger."""
    jobs, slot = [], 0
    for owner, n in held.items():
        for _ in range(n):
            job = running(100 + slot, (f"n{1 + slot // 8}", (slot % 8,)), project=owner)
            started = T0 - 2 * HOUR + slot * timedelta(minutes=1)
            jobs.append(replace(job, spec=replace(job.spec, checkpoint_dir="/ckpt"), started_at=started))
            slot += 1
    return jobs


def _taken(held: dict[str, int]) -> list[str]:
    jobs = _tree_held(held)
    result = schedule(snapshot(NODES, [pending(1, project="nlp")], jobs, TREE), ON)
    by_id = {r.id: r.spec.project for r in jobs}
    return [by_id[p.job_id] for p in result.preemptions]


def test_in_a_tree_shares_are_compared_where_the_two_paths_meet() -> None:
    # genome holds twice its share of 1 and its jobs are the youngest, but bio holds its own 2, and
    # cs would go beyond its 2 with nlp's job: against nlp the comparison with genome is cs against
    # bio, which gives nothing. Beside nlp, vision holds beyond its share: it gives back.
    assert _taken({"default": 8, "lab": 4, "vision": 2, "genome": 2}) == ["vision"]


def test_in_a_tree_a_unit_beyond_its_share_gives_back_to_a_unit_below_its_own() -> None:
    # cs holds 1 of its 2: nlp's job stays within nlp's and cs's shares. lab holds 5 of its 4, so
    # lab gives back, not genome (beyond its own share, inside a bio that holds just its own).
    assert _taken({"default": 8, "vision": 1, "lab": 5, "genome": 2}) == ["lab"]

"""--max-user-logs, the choice (domain/user_logs.py): per owner over the cap, finished jobs' logs
oldest first, only as many as it takes; running jobs and small logs never; other owners untouched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.resources import format_bytes
from gpupool.domain.user_logs import LEAST_BYTES, JobLogs, to_empty

T0 = datetime(2026, 11, 1, tzinfo=UTC)
MB = 2**20


def job(job_id: int, owner: str, mb: float, ended_h: float | None) -> JobLogs:
    return JobLogs(job_id, owner, int(mb * MB), None if ended_h is None else T0 + timedelta(hours=ended_h))


def test_the_oldest_finished_go_first_and_only_as_many_as_it_takes() -> None:
    jobs = [
        job(1, "ana", 4, ended_h=3),
        job(2, "ana", 4, ended_h=1),  # the oldest end: first
        job(3, "ana", 4, ended_h=2),
        job(4, "ana", 8, ended_h=None),  # running: counts, never emptied
        job(5, "bo", 3, ended_h=0),  # another owner, under the cap
    ]
    assert [j.job_id for j in to_empty(jobs, cap=13 * MB)] == [2, 3]  # 20 -> 16 -> 12 MB
    assert to_empty(jobs, cap=20 * MB) == []
    assert [j.job_id for j in to_empty(jobs, cap=1 * MB)] == [2, 3, 1, 5]  # as much as can go


def test_an_emptied_log_is_not_emptied_again() -> None:
    jobs = [job(1, "ana", LEAST_BYTES / MB, ended_h=0), job(2, "ana", 9, ended_h=1)]
    assert [j.job_id for j in to_empty(jobs, cap=1 * MB)] == [2]


@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(0, 50 * MB), st.one_of(st.none(), st.integers(0, 1000))),
        max_size=40,
    ),
    st.integers(0, 100 * MB),
)
def test_after_emptying_every_owner_fits_or_has_nothing_left_to_empty(
    raw: list[tuple[str, int, int | None]], cap: int
) -> None:
    jobs = [JobLogs(i, o, size, None if h is None else T0 + timedelta(hours=h)) for i, (o, size, h) in enumerate(raw)]
    chosen = {j.job_id for j in to_empty(jobs, cap)}
    for owner in {j.owner for j in jobs}:
        mine = [j for j in jobs if j.owner == owner]
        left = sum(j.size for j in mine if j.job_id not in chosen)
        spare = [j for j in mine if j.job_id not in chosen and j.finished_at is not None and j.size > LEAST_BYTES]
        assert left <= cap or not spare
        picked = sorted((j for j in mine if j.job_id in chosen), key=lambda j: (j.finished_at, j.job_id))
        # never one more than needed: without the last one chosen, the owner was still over
        if picked:
            assert left + picked[-1].size > cap
        assert all(j.finished_at is not None for j in picked)


def test_sizes_are_said_shortly() -> None:
    assert [format_bytes(n) for n in (900, 12 * 1024, 200 * MB, 3 * 2**30 // 2)] == ["900B", "12K", "200M", "1.5G"]

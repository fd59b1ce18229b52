"""Elastic jobs' ``--workers MIN:MAX`` (issue 35): what is taken, and what is refused with the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpupool.domain.elastic import width_over_time
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec


@pytest.mark.parametrize(
    ("workers", "max_workers", "expected"),
    [
        (4, None, (4, None)),
        ("4", None, (4, None)),
        ("2:8", None, (2, 8)),
        (" 2 : 8 ", None, (2, 8)),
        ("3:3", None, (3, None)),  # a range of one is a gang
        (2, 8, (2, 8)),
        (1, 1, (1, None)),
    ],
)
def test_workers_are_a_gang_or_a_range(workers: int | str, max_workers: int | None, expected: tuple) -> None:
    spec = JobSpec.create(command=["torchrun"], gpus=1, workers=workers, max_workers=max_workers)
    assert (spec.workers, spec.max_workers) == expected
    assert spec.elastic is (expected[1] is not None)
    assert spec.most_workers == (expected[1] or expected[0])
    assert spec.total_gpus == expected[0]  # only the minimum counts against a quota


@pytest.mark.parametrize(
    ("workers", "max_workers", "words"),
    [
        ("8:2", None, "the least (8) is above the most (2)"),
        ("0:4", None, "from 1 to 4096, got 0"),
        ("2:5000", None, "from 1 to 4096, got 5000"),
        ("2:x", None, "the most workers of '2:x'"),
        (":4", None, "the least workers of ':4'"),
        ("2:8", 8, "already gives a maximum"),
        (4, 2, "the least (4) is above the most (2)"),
        (True, None, "workers must be a whole number"),
    ],
)
def test_bad_ranges_say_why(workers: object, max_workers: int | None, words: str) -> None:
    with pytest.raises(InvalidInput, match=words.replace("(", r"\(").replace(")", r"\)")):
        JobSpec.create(command=["x"], gpus=1, workers=workers, max_workers=max_workers)  # type: ignore[arg-type]


def test_an_elastic_job_needs_whole_gpus() -> None:
    with pytest.raises(InvalidInput, match="an elastic job needs whole GPUs per worker"):
        JobSpec.create(command=["x"], gpus=0.5, workers="1:3")


def test_the_range_round_trips_as_plain_data() -> None:
    spec = JobSpec.create(command=["x"], gpus=2, workers="2:8")
    assert spec.workers_text == "2:8"
    assert JobSpec.from_dict(spec.to_dict()) == spec
    body = spec.submission()
    assert (body["workers"], body["max_workers"]) == (2, 8)
    assert JobSpec.create(**body) == spec
    assert "max_workers" not in JobSpec.create(command=["x"]).submission()


def test_width_over_time_counts_the_workers_at_each_change() -> None:

    t = datetime(2026, 11, 27, tzinfo=UTC)
    m = timedelta(minutes=1)
    spans = [(t, None), (t + m, t + 5 * m), (t + m, t + 3 * m), (t + 3 * m, None)]  # one replaced at 3
    assert width_over_time(spans) == [(t, 1), (t + m, 3), (t + 5 * m, 2)]
    assert width_over_time([]) == []


@pytest.mark.parametrize("workers", ["²", "1:²", "1:" + "9" * 5000, "٣", "1:٣"])
def test_digits_python_reads_but_int_does_not_are_refused_not_a_crash(workers: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        JobSpec.create(command=["x"], gpus=1, workers=workers)
    assert len(str(refused.value)) < 200

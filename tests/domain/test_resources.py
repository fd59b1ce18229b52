import pytest

from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.resources import parse_memory, validate_gpus


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("8G", 8192),
        ("8g", 8192),
        ("8GiB", 8192),
        ("8GB", 8192),
        ("512M", 512),
        ("512", 512),
        ("1.5G", 1536),
        ("1T", 1048576),
        ("2048K", 2),
        (" 4G ", 4096),
        (4096, 4096),
        (None, 0),
        ("1048576B", 1),
    ],
)
def test_parse_memory_accepts_the_usual_spellings(text: str | int | None, mib: int) -> None:
    assert parse_memory(text) == mib


@pytest.mark.parametrize("text", ["8X", "G", "-1G", "eight", "8 G B", "", "1e3"])
def test_parse_memory_rejects_malformed_sizes_with_a_hint(text: str) -> None:
    with pytest.raises(InvalidInput, match="malformed memory size"):
        parse_memory(text)


@pytest.mark.parametrize("value", [0, 0.5, 0.25, 1, 2, 8, 2.0])
def test_validate_gpus_accepts_zero_fractions_and_whole_numbers(value: float) -> None:
    assert validate_gpus(value) == float(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "negative"),
        (1.5, "neither a whole number"),
        (2.25, "neither a whole number"),
        (float("nan"), "number"),
        (float("inf"), "finite"),
        (0.0001, "smallest share"),
    ],
)
def test_validate_gpus_rejects(value: float, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_gpus(value)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1.5h", 5400)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_rejects_garbage() -> None:
    with pytest.raises(InvalidInput, match="malformed duration"):
        parse_duration("soon")

"""An array accepted as one record keeps its unwritten tasks' indices as ``ArraySpec.folded()``
(issue 36): that text must give back exactly those indices, and stay short for a stepped range."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.arrays import MAX_ARRAY_INDEX, MAX_ARRAY_TASKS, ArraySpec

INDICES = st.lists(st.integers(0, MAX_ARRAY_INDEX), min_size=1, max_size=300, unique=True).map(
    lambda xs: tuple(sorted(xs))
)


@given(INDICES)
def test_folded_indices_parse_back_to_themselves(indices: tuple[int, ...]) -> None:
    assert ArraySpec.parse(ArraySpec(indices).folded()).indices == indices


@given(st.integers(0, 1000), st.integers(1, 50), st.integers(3, MAX_ARRAY_TASKS))
def test_a_stepped_range_folds_to_one_run(first: int, step: int, count: int) -> None:
    indices = tuple(range(first, first + step * count, step))
    folded = ArraySpec(indices).folded()
    assert "," not in folded and ArraySpec.parse(folded).indices == indices


def test_what_folds_and_what_does_not() -> None:
    assert ArraySpec.parse("1,3,10-12,20-40:10,7").folded() == "1,3,7,10-12,20-40:10"
    assert ArraySpec((4, 9)).folded() == "4,9"  # two are not a run

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess


@pytest.fixture
def head_factory(tmp_path: Path) -> Iterator[type[HeadProcess]]:
    """Heads made by a test; every process they started is killed when the test ends."""
    made: list[HeadProcess] = []

    class Factory(HeadProcess):
        def __init__(self, data_dir: Path | None = None, **kwargs: object) -> None:
            super().__init__(data_dir or tmp_path / "data", **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield Factory
    for head in made:
        head.kill_everything()


@pytest.fixture
def head(head_factory: type[HeadProcess]) -> HeadProcess:
    """A running 2 nodes x 4 simulated GPUs head."""
    return head_factory().start()


@pytest.fixture(scope="module")
def shared_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    """One head for a module whose tests change nothing (bad input is refused, not recorded)."""
    head = HeadProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield head
    head.kill_everything()

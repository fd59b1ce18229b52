"""No test module imports from another (issue 31, part 8): what tests share lives in tests/support.

A test module that imports another's fake ties the two folders together (moving or deleting the one
breaks the other) and, with ``from tests.x.test_y import *`` or an imported ``test_`` function, runs
the other's tests twice. Every import counts, inside a function too, and a relative one is resolved
against the importing module's package. A name with any part after ``tests`` that starts with
``test_`` is refused, a function too: imported into a test module, pytest would collect it there.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.support.source_imports import imported_names

TESTS = Path(__file__).resolve().parents[1]


def violations(sources: Mapping[str, str]) -> list[str]:
    """``path: imported name`` for every import of a test module, over path (relative to the
    repository, e.g. "tests/api/test_nodes.py") -> source."""
    found = []
    for path, source in sorted(sources.items()):
        package = list(Path(path).parent.parts)
        for name in sorted(imported_names(source, package)):
            parts = name.split(".")
            if parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:]):
                found.append(f"{path}: {name}")
    return found


def test_no_test_module_imports_from_another() -> None:
    sources = {str(p.relative_to(TESTS.parent)): p.read_text() for p in sorted(TESTS.rglob("*.py"))}
    assert len(sources) > 100, "the tests were not found"
    assert violations(sources) == [], "import it from tests/support instead (move what is shared there)"


def test_the_check_sees_each_way_of_importing_a_test_module() -> None:
    """Guards the test above: each of these imports from a test module and is refused; what the
    support package and the source under test offer is not."""
    bad = {
        "tests/a/test_1.py": "from tests.store.test_x import FakeExecutor\n",
        "tests/a/test_2.py": "import tests.unit.test_y\n",
        "tests/a/test_3.py": "from tests.store import test_x\n",
        "tests/a/test_4.py": "def f() -> None:\n    from .test_z import helper\n",
        "tests/a/test_5.py": "from ..b.test_w import helper\n",
        "tests/a/helpers.py": "from tests.a.test_1 import thing\n",
    }
    assert [v.split(":")[0] for v in violations(bad)] == sorted(bad)
    good = {
        "tests/a/test_6.py": "from tests.support.executor import FakeExecutor\nimport tests.support.builders\n",
        "tests/a/test_7.py": "from gpupool.domain.jobs import JobSpec\nfrom .helpers import thing\n",
        "tests/a/test_8.py": "from tests.multinode.conftest import RayCluster\n",
    }
    assert violations(good) == []

"""The table of backends: each name maps to a builder and declares what its backend can do, so
callers check an ability instead of a backend's name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.backends import BACKENDS, build
from gpupool.domain.errors import InvalidInput
from gpupool.executors.capabilities import Capabilities
from gpupool.executors.local import LocalExecutor
from gpupool.settings import Settings


def test_the_table_lists_local_and_ray_and_each_declares_its_capabilities() -> None:
    assert list(BACKENDS) == ["local", "ray"]
    assert all(b.name == name and isinstance(b.capabilities, Capabilities) for name, b in BACKENDS.items())
    local, ray = BACKENDS["local"].capabilities, BACKENDS["ray"].capabilities
    assert (local.multi_host, local.node_join, local.node_loss, local.self_fencing) == (False,) * 4
    assert local.simulated_nodes
    assert (ray.multi_host, ray.node_join, ray.node_loss, ray.self_fencing) == (True,) * 4
    assert not ray.simulated_nodes


def test_each_executor_carries_its_backends_declaration() -> None:
    assert LocalExecutor.capabilities is BACKENDS["local"].capabilities
    pytest.importorskip("ray")
    from gpupool.executors.ray import RayExecutor

    assert RayExecutor.capabilities is BACKENDS["ray"].capabilities


def test_reading_the_table_does_not_import_ray() -> None:
    code = "import sys, gpupool.backends; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_the_local_backend_builds_its_virtual_nodes(tmp_path: Path) -> None:
    built = build(Settings(data_dir=tmp_path, fake_nodes=2, fake_gpus=1))
    assert isinstance(built.executor, LocalExecutor) and built.cluster is None and built.notes == []
    assert [n.name for n in built.executor.nodes()] == ["node-1", "node-2"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"backend": "k8s"}, "--backend must be local or ray, not 'k8s'"),
        (
            {"backend": "ray", "fake_nodes": 2},
            "--fake-nodes and --fake-hardware are for the local backend; on Ray, nodes join with gpupool join "
            "HEAD_URL --num-gpus N (and --fake-gpus N gives the head's own node simulated GPUs)",
        ),
    ],
)
def test_what_a_backend_cannot_do_is_refused_before_anything_starts(
    tmp_path: Path, overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        build(Settings(data_dir=tmp_path, **overrides))  # type: ignore[arg-type]
    assert str(refused.value) == message

"""Which nodes a head serves: fake cluster, a JSON hardware description, real GPUs, or a demo."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from gpupool.backends import plan_nodes
from gpupool.domain.errors import InvalidInput
from gpupool.domain.nodes import GpuInfo
from gpupool.node.gpu.fake import FakeProbe
from gpupool.settings import Settings


class StubNvml:
    """Stands in for NVML on a machine with GPUs: reports two real (not simulated) GPUs."""

    def __init__(self, count: int) -> None:
        self.count = count

    def gpus(self) -> list[GpuInfo]:
        return [GpuInfo(i, f"GPU-real-{i}", "NVIDIA H100 80GB HBM3", 81559, False) for i in range(self.count)]


def settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(data_dir=tmp_path, **kw)  # type: ignore[arg-type]


def test_fake_cluster_wins_over_real_gpus(tmp_path: Path) -> None:
    topo = plan_nodes(settings(tmp_path, fake_nodes=3, fake_gpus=2), StubNvml(8))
    assert [name for name, _ in topo.probes] == ["node-1", "node-2", "node-3"]
    assert all(len(p.gpus()) == 2 and all(g.simulated for g in p.gpus()) for _, p in topo.probes)
    assert topo.simulated


def test_real_gpus_form_one_node_named_after_the_host(tmp_path: Path) -> None:
    topo = plan_nodes(settings(tmp_path), StubNvml(2))
    ((name, probe),) = topo.probes
    assert name == socket.gethostname()
    assert not topo.simulated and [g.simulated for g in probe.gpus()] == [False, False]


def test_no_gpus_and_no_flags_gives_a_demo_cluster_that_says_so(tmp_path: Path) -> None:
    topo = plan_nodes(settings(tmp_path), StubNvml(0))
    assert len(topo.probes) == 2 and topo.simulated and "demo" in topo.note
    assert sum(len(p.gpus()) for _, p in topo.probes) == 8


def test_hardware_description(tmp_path: Path) -> None:
    spec = tmp_path / "hw.json"
    spec.write_text(
        json.dumps(
            {
                "nodes": [
                    {"name": "a100-1", "gpus": [{"model": "A100", "memory_mib": 40960, "nvlink_group": 0}] * 2},
                    {"name": "t4-1", "gpus": [{"model": "T4", "memory_mib": 15360}]},
                ]
            }
        )
    )
    topo = plan_nodes(settings(tmp_path, fake_hardware=spec), StubNvml(8))
    got = {name: [(g.index, g.model, g.memory_mib, g.nvlink_group) for g in p.gpus()] for name, p in topo.probes}
    assert got == {"a100-1": [(0, "A100", 40960, 0), (1, "A100", 40960, 0)], "t4-1": [(0, "T4", 15360, None)]}


@pytest.mark.parametrize(
    "content", ["not json", '{"nodes": []}', '{"nodes": [{"name": "a"}, {"name": "a"}]}', '{"nodes": [{"gpus": []}]}']
)
def test_bad_hardware_description_is_a_clear_error(tmp_path: Path, content: str) -> None:
    spec = tmp_path / "hw.json"
    spec.write_text(content)
    with pytest.raises(InvalidInput, match="hardware description"):
        plan_nodes(settings(tmp_path, fake_hardware=spec), StubNvml(0))


def test_fake_gpu_uuids_are_stable_and_distinct() -> None:
    a, b = FakeProbe("node-1", 4).gpus(), FakeProbe("node-2", 4).gpus()
    assert [g.uuid for g in a] == [g.uuid for g in FakeProbe("node-1", 4).gpus()]
    assert not {g.uuid for g in a} & {g.uuid for g in b}
    assert all(g.simulated and g.model.startswith("Simulated") for g in a)


def test_nvml_probe_on_a_machine_without_nvidia_gpus_reports_none() -> None:
    from pathlib import Path as P

    from gpupool.node.gpu.nvml import NvmlProbe

    if P("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver; the no-GPU path cannot be observed here")
    assert NvmlProbe().gpus() == []

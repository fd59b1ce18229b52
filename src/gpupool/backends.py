"""The backends the head can run on, by name: ``gpupool up --backend NAME`` picks one here.

Each entry says what the backend can do (``Capabilities``, data callers check) and how to build
it from the settings. A new backend is an executor (``executors/base.py``), a declaration of its
capabilities, and one entry in ``BACKENDS``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from gpupool.domain.errors import InvalidInput
from gpupool.executors.base import Executor
from gpupool.executors.capabilities import LOCAL, RAY, Capabilities
from gpupool.executors.local import LocalExecutor
from gpupool.node.gpu.fake import DEFAULT_MODEL, FakeProbe, load_hardware
from gpupool.node.gpu.nvml import NvmlProbe
from gpupool.node.gpu.probe import GpuProbe
from gpupool.node.runtime import NodeRuntime
from gpupool.settings import Settings
from gpupool.usecases.context import RayCluster

DEMO_NODES, DEMO_GPUS = 2, 4


@dataclass(frozen=True, slots=True)
class Topology:
    probes: list[tuple[str, GpuProbe]]
    simulated: bool
    note: str


@dataclass(frozen=True, slots=True)
class Built:
    """A backend ready to serve: its executor, and what the head tells about it."""

    executor: Executor
    topology: Topology
    cluster: RayCluster | None = None  # how nodes join, for backends that let them
    notes: list[str] = field(default_factory=list)  # printed under the head's ready line
    # Stop what the backend started, when the head stops: given how many workers still run, it
    # returns what to tell (a Ray head this data dir started is stopped only when none runs on it).
    on_stop: Callable[[int], str] | None = None
    # Given the controller's wake, call it as soon as a worker exits (else exits wait for a tick).
    watch_exits: Callable[[Callable[[], None]], None] | None = None


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    capabilities: Capabilities
    build: Callable[[Settings], Built]
    nodes_hint: str = ""  # where its nodes come from, for a backend without simulated nodes


def build(settings: Settings) -> Built:
    """The backend ``settings.backend`` names, built; an unknown name, or options it cannot
    honour, are refused before anything starts."""
    backend = BACKENDS.get(settings.backend)
    if backend is None:
        raise InvalidInput(f"--backend must be {' or '.join(BACKENDS)}, not {settings.backend!r}")
    simulated = settings.fake_nodes is not None or settings.fake_hardware is not None
    if simulated and not backend.capabilities.simulated_nodes:
        able = " or ".join(b.name for b in BACKENDS.values() if b.capabilities.simulated_nodes)
        raise InvalidInput(f"--fake-nodes and --fake-hardware are for the {able} backend; {backend.nodes_hint}")
    return backend.build(settings)


def plan_nodes(settings: Settings, nvml: GpuProbe) -> Topology:
    """Fake nodes when asked; else the real GPUs as one node; else a simulated demo cluster."""
    if settings.fake_hardware is not None:
        return Topology([(p.node, p) for p in load_hardware(settings.fake_hardware)], True, "")
    if settings.fake_nodes is not None or settings.fake_gpus is not None:
        count = settings.fake_nodes if settings.fake_nodes is not None else 1
        gpus = settings.fake_gpus if settings.fake_gpus is not None else DEMO_GPUS
        if count < 1 or gpus < 0:
            raise InvalidInput("--fake-nodes must be >= 1 and --fake-gpus >= 0")
        model = settings.fake_gpu_model or DEFAULT_MODEL
        return Topology([(f"node-{i + 1}", FakeProbe(f"node-{i + 1}", gpus, model)) for i in range(count)], True, "")
    if nvml.gpus():
        return Topology([(socket.gethostname(), nvml)], False, "")
    probes: list[tuple[str, GpuProbe]] = [
        (f"node-{i + 1}", FakeProbe(f"node-{i + 1}", DEMO_GPUS)) for i in range(DEMO_NODES)
    ]
    return Topology(probes, True, "no NVIDIA GPU found, so this is a demo cluster")


def _build_local(settings: Settings) -> Built:
    """Virtual nodes on this machine, sharing its CPUs and memory, one runtime each."""
    topology = plan_nodes(settings, NvmlProbe())
    host_cpus = sorted(os.sched_getaffinity(0))
    runtimes = [
        NodeRuntime(
            name=name,
            address="127.0.0.1",
            probe=probe,
            data_dir=settings.data_dir / "nodes" / name,
            base_env=settings.base_env,
            cpus=len(host_cpus),
            memory_mib=_host_memory_mib(),
            host_cpus=host_cpus,
            cgroups_wanted=settings.cgroups,
            max_log_bytes=settings.max_log_bytes,
            image_cache_bytes=settings.image_cache_bytes,
        )
        for name, probe in topology.probes
    ]
    executor = LocalExecutor(runtimes)
    return Built(executor, topology, watch_exits=executor.watch_exits)


def _build_ray(settings: Settings) -> Built:
    """Every node of a Ray cluster; ``head_ray`` loads Ray only now."""
    from gpupool import head_ray

    ray = head_ray.build(settings)
    notes = [n for n in [head_ray.describe_exposure(ray.exposed)] if n]
    ray_dir = settings.data_dir / "ray"
    on_stop = None if settings.ray_address else partial(head_ray.after_head, ray_dir)  # never a Ray it did not start
    return Built(ray.executor, Topology([], True, ""), ray.cluster, notes, on_stop)


def _host_memory_mib() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("local", LOCAL, _build_local),
        Backend(
            "ray",
            RAY,
            _build_ray,
            nodes_hint="on Ray, nodes join with gpupool join HEAD_URL --num-gpus N"
            " (and --fake-gpus N gives the head's own node simulated GPUs)",
        ),
    )
}

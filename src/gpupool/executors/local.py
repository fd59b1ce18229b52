"""The embedded backend: the head and N virtual nodes on this machine, workers as real processes.

Virtual nodes share the machine's CPUs and memory; each owns a distinct set of GPU indices
(real ones when NVML finds GPUs and no fake cluster was asked for, simulated ones otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from gpupool.domain.errors import NotFound
from gpupool.domain.images import NodeImage
from gpupool.domain.launch import ImagePhase, LaunchRequest, PowerSetting, Stats, WorkerExit, WorkerHandle
from gpupool.domain.nodes import Node
from gpupool.domain.telemetry import GpuSample
from gpupool.domain.worker_env import Rendezvous
from gpupool.executors.capabilities import LOCAL
from gpupool.node.exit_watch import ExitWatch
from gpupool.node.runtime import NodeRuntime


class LocalExecutor:
    capabilities = LOCAL

    def __init__(self, runtimes: list[NodeRuntime]) -> None:
        self._runtimes = {r.name: r for r in runtimes}
        self._watches: list[ExitWatch] = []

    def watch_exits(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` as soon as a worker's exit is recorded (the head wakes its controller)."""
        for data_dir in sorted({r.data_dir for r in self._runtimes.values()}):
            self._watches.append(ExitWatch(data_dir, wake))

    def nodes(self) -> list[Node]:
        return [r.describe() for r in self._runtimes.values()]

    def rendezvous(self, node: str) -> Rendezvous:
        runtime = self._runtime(node)
        return Rendezvous(master_addr=runtime.address, master_port=runtime.free_port())

    def launch(self, node: str, request: LaunchRequest) -> WorkerHandle:
        return self._runtime(node).launch(request)

    def find(self, node: str, job_id: int, attempt: int, worker: int) -> WorkerHandle | None:
        return self._runtime(node).find(job_id, attempt, worker)

    def poll(self, node: str, handle: WorkerHandle) -> WorkerExit | None:
        return self._runtime(node).poll(handle)

    def kill(self, node: str, handle: WorkerHandle) -> None:
        self._runtime(node).kill(handle)

    def read_log(self, node: str, job_id: int, worker: int, offset: int) -> bytes:
        return self._runtime(node).read_log(job_id, worker, offset)

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        return self._runtime(node).sample(busy)

    def usage(self, node: str, handles: Sequence[WorkerHandle]) -> list[Stats | None]:
        return self._runtime(node).usage(handles)

    def image_phases(self, node: str, handles: Sequence[WorkerHandle]) -> list[ImagePhase | None]:
        return self._runtime(node).image_phases(handles)

    def forget(self, node: str, job_ids: Sequence[int]) -> int:
        return self._runtime(node).forget(job_ids)

    def log_sizes(self, node: str) -> dict[int, int]:
        return self._runtime(node).log_sizes()

    def empty_logs(self, node: str, job_ids: Sequence[int], note: str) -> int:
        return self._runtime(node).empty_logs(job_ids, note)

    def protect(self, node: str, endpoints: Sequence[tuple[str, int, int]]) -> bool:
        self._runtime(node).protect(endpoints)
        return True

    def images(self, node: str) -> list[NodeImage]:
        return self._runtime(node).image_cache.listing()

    def import_image(self, node: str, path: str, name: str) -> NodeImage:
        return self._runtime(node).image_cache.import_archive(path, name)

    def set_gpu_power(self, node: str, gpus: Sequence[int], setting: PowerSetting | None) -> list[str]:
        return [f"{node}: this head does not set GPU power limits yet"]  # a stand-in until the nodes do (pnode)

    def close(self) -> None:
        for watch in self._watches:
            watch.close()
        for runtime in self._runtimes.values():
            runtime.close()

    def _runtime(self, node: str) -> NodeRuntime:
        try:
            return self._runtimes[node]
        except KeyError:
            raise NotFound(f"node {node} is not served by this head", code="node_not_found") from None

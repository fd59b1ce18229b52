"""The backend interface the controller is given: where workers run.

Every call names a node and a worker: launch one (``launch``), find one a dead head launched
(``find``), ask whether it ended (``poll``), stop it (``kill``), read its log (``read_log``); and
for the cluster: which nodes there are (``nodes``), where a gang meets (``rendezvous``), GPU
readings (``telemetry``), the images each node holds (``images``, ``import_image``). The words of
the contract (``LaunchRequest``, ``WorkerHandle``, ``WorkerExit``, ``Stats``, ``NodeImage``) are
the domain's (``domain/launch.py``, ``domain/images.py``); a handle is kept in the store
(``WorkerHandle.to_json``), so a restarted head can hand it back to a new executor and re-adopt
the worker. What a backend can do beyond that
(several machines, nodes joining, self-fencing) it declares in ``capabilities``.

Backends are chosen by name from the table in ``gpupool/backends.py``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from gpupool.domain.images import NodeImage
from gpupool.domain.launch import ImagePhase, LaunchRequest, PowerSetting, Stats, WorkerExit, WorkerHandle
from gpupool.domain.nodes import Node
from gpupool.domain.telemetry import GpuSample
from gpupool.domain.worker_env import Rendezvous
from gpupool.executors.capabilities import Capabilities


class Executor(Protocol):
    @property
    def capabilities(self) -> Capabilities: ...

    def nodes(self) -> list[Node]: ...

    def rendezvous(self, node: str) -> Rendezvous: ...

    def launch(self, node: str, request: LaunchRequest) -> WorkerHandle: ...

    def find(self, node: str, job_id: int, attempt: int, worker: int) -> WorkerHandle | None: ...

    def poll(self, node: str, handle: WorkerHandle) -> WorkerExit | None: ...

    def kill(self, node: str, handle: WorkerHandle) -> None: ...

    def read_log(self, node: str, job_id: int, worker: int, offset: int) -> bytes:
        """Up to 1 MiB of a worker's log from ``offset`` (negative: from its end); the log lives on
        the worker's node."""
        ...

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        """A reading of every GPU of ``node``; ``busy``: the GPU indices its live workers hold.
        Empty for a node that is down or silent: a reading is never worth waiting on."""
        ...

    def usage(self, node: str, handles: Sequence[WorkerHandle]) -> list[Stats | None]:
        """What each live worker's cgroup says it uses, in the order of ``handles`` (None: no cgroup)."""
        ...

    def image_phases(self, node: str, handles: Sequence[WorkerHandle]) -> list[ImagePhase | None]:
        """Where each worker's supervisor is with its image, in the order of ``handles`` (None: no
        image, or nothing said yet)."""
        ...

    def forget(self, node: str, job_ids: Sequence[int]) -> int:
        """Delete what ``node`` keeps of jobs the head pruned (run directories, logs)."""
        ...

    def log_sizes(self, node: str) -> dict[int, int]:
        """The bytes of each job's logs kept on ``node`` (job id -> bytes)."""
        ...

    def empty_logs(self, node: str, job_ids: Sequence[int], note: str) -> int:
        """Replace the logs of these finished jobs on ``node`` by ``note``; the bytes freed."""
        ...

    def protect(self, node: str, endpoints: Sequence[tuple[str, int, int]]) -> bool:
        """The ports jobs on other nodes serve, as (address, port, job id), walled from ``node``'s
        other jobs (``node/netwall.py``); the set replaces the last one given. False where the
        node could not be told now (silent): the caller tries again."""
        ...

    def images(self, node: str) -> list[NodeImage]:
        """The images ``node``'s cache holds (``gpupool images``). Empty for a node that is down or
        silent, as telemetry is."""
        ...

    def import_image(self, node: str, path: str, name: str) -> NodeImage:
        """Unpack the OCI archive or layout at ``path`` (a file system ``node`` sees) into its
        cache as ``name``. InvalidInput (code ``bad_image``) with the node's sentence where it is no
        usable image; Unavailable where the node cannot be asked now."""
        ...

    def set_gpu_power(self, node: str, gpus: Sequence[int], setting: PowerSetting | None) -> list[str]:
        """Set the power of these GPUs of a node (None: their default), for the power budget's
        throttle; sentences of what was done or refused (issue 33)."""
        ...

    def close(self) -> None: ...

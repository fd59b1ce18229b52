"""A fake executor: it serves fixed nodes and launches nothing, and a worker runs until the test
says it exited. The controller tests drive a real controller and store through it; the API tests
register its nodes. Also the two people most tests act as.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any

from gpupool.clock import Clock
from gpupool.domain.errors import InvalidInput, Unavailable
from gpupool.domain.images import NodeImage
from gpupool.domain.launch import ImagePhase, LaunchRequest, PowerSetting, Stats, WorkerExit, WorkerHandle
from gpupool.domain.nodes import Node
from gpupool.domain.telemetry import GpuSample
from gpupool.domain.worker_env import Rendezvous
from gpupool.node.gpu.simulated import SimulatedSensors
from gpupool.store.tokens import Principal

ADMIN = Principal("admin", "admin")
USER = Principal("alice", "user")
KILLED = -15  # what a worker stopped by SIGTERM reports


class FakeExecutor:
    """Serves fixed nodes and launches nothing: a worker runs until the test says it exited."""

    def __init__(self, nodes: Iterable[Node], clock: Clock | None = None) -> None:
        self._nodes = list(nodes)
        self.launched: list[tuple[str, LaunchRequest]] = []
        self._exits: dict[tuple[int, int, int], WorkerExit] = {}
        self.clock = clock  # with a clock, telemetry is simulated readings at its time; without, none
        self.sensors = SimulatedSensors()
        self.sampled: list[tuple[str, frozenset[int]]] = []
        self.forgotten: list[tuple[str, tuple[int, ...]]] = []
        self.protected: dict[str, tuple[tuple[str, int, int], ...]] = {}  # the ports walled from each node
        self.taken_ports: set[int] = set()
        self.logs: dict[str, dict[int, int]] = {}  # node -> job id -> bytes of its logs there (the test sets them)
        self.emptied: list[tuple[str, tuple[int, ...], str]] = []  # ports something else listens on: no node walls them
        self.started_at: dict[str, float] = {}  # run dir -> when its worker was launched (its CPU time)
        self.phases: dict[int, ImagePhase] = {}  # job id -> what its workers' supervisors say of its image
        self.held_images: dict[str, list[NodeImage]] = {}  # node -> the images its cache holds
        self.bad_archives: dict[str, str] = {}  # path -> the node's sentence refusing to import it
        self.silent: set[str] = set()  # nodes that answer no image call (a Ray node not answering)
        self.power_notes: dict[int, str] = {}  # job id -> what its workers' nodes say of its GPUs' power at launch
        self.power_set: list[tuple[str, tuple[int, ...], PowerSetting | None]] = []  # each set_gpu_power call
        self.power_refused: str | None = None  # NVML's words for every node refusing to set GPU power
        self.curves: dict[str, list[dict[str, Any]]] = {}  # node -> what its power calibration measures
        self.calibrated: list[tuple[str, float, tuple[int, ...]]] = []

    def exit(
        self,
        job_id: int,
        exit_code: int,
        reason: str | None = None,
        note: str | None = None,
        workers: Collection[int] | None = None,
    ) -> None:
        """Every worker of the job's latest attempt (or those of ``workers``) exits with
        ``exit_code`` (and the node's reason and note)."""
        attempt = max(r.attempt for _, r in self.launched if r.job_id == job_id)
        for _, r in self.launched:
            if (r.job_id, r.attempt) == (job_id, attempt) and (workers is None or r.worker in workers):
                self._exits[(r.job_id, r.attempt, r.worker)] = WorkerExit(exit_code, reason=reason, note=note)

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def rendezvous(self, node: str) -> Rendezvous:
        return Rendezvous(master_addr=node, master_port=29500)

    @staticmethod
    def key(handle: WorkerHandle) -> tuple[int, int, int]:
        """(job id, attempt, worker) of a handle this executor gave: its run dir says them, as a
        node's does (``.../job-J/attempt-A/worker-W``)."""
        job, attempt, worker = (int(p.split("-")[1]) for p in handle.run_dir.split("/")[-3:])
        return job, attempt, worker

    def launch(self, node: str, request: LaunchRequest) -> WorkerHandle:
        self.launched.append((node, request))
        run_dir = f"fake/job-{request.job_id}/attempt-{request.attempt}/worker-{request.worker}"
        self.started_at[run_dir] = self.clock.now().timestamp() if self.clock is not None else 0.0
        # A port is said as a node's runtime says one it walled for the job.
        port = request.port if request.port and request.port not in self.taken_ports else None
        note = self.power_notes.get(request.job_id)
        return WorkerHandle(0, run_dir, job=request.job_id if port else None, port=port, power_note=note)

    def find(self, node: str, job_id: int, attempt: int, worker: int) -> WorkerHandle | None:
        return None

    def poll(self, node: str, handle: WorkerHandle) -> WorkerExit | None:
        return self._exits.get(self.key(handle))

    def kill(self, node: str, handle: WorkerHandle) -> None:
        pass  # the test reports a victim's exit itself: the simulator stops victims at once

    def read_log(self, node: str, job_id: int, worker: int, offset: int) -> bytes:
        return b""

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        self.sampled.append((node, frozenset(busy)))
        if self.clock is None:
            return []
        gpus = next((n.gpus for n in self.nodes() if n.name == node), ())
        return self.sensors.read(node, gpus, busy, self.clock.now())

    def usage(self, node: str, handles: Sequence[WorkerHandle]) -> list[Stats | None]:
        """With a clock: each worker holds 256 MiB (512 at its peak) and keeps one core busy."""
        if self.clock is None:
            return [None] * len(handles)
        now = self.clock.now().timestamp()
        return [Stats(256 * 2**20, 512 * 2**20, now - self.started_at.get(h.run_dir, now)) for h in handles]

    def image_phases(self, node: str, handles: Sequence[WorkerHandle]) -> list[ImagePhase | None]:
        return [self.phases.get(self.key(h)[0]) for h in handles]

    def log_sizes(self, node: str) -> dict[int, int]:
        return dict(self.logs.get(node, {}))

    def empty_logs(self, node: str, job_ids: Sequence[int], note: str) -> int:
        kept = self.logs.setdefault(node, {})
        freed = sum(max(0, kept.get(j, 0) - len(note)) for j in job_ids if j in kept)
        kept.update({j: min(kept[j], len(note)) for j in job_ids if j in kept})
        self.emptied.append((node, tuple(job_ids), note))
        return freed

    def protect(self, node: str, endpoints: Sequence[tuple[str, int, int]]) -> bool:
        self.protected[node] = tuple(endpoints)
        return True

    def forget(self, node: str, job_ids: Sequence[int]) -> int:
        self.forgotten.append((node, tuple(job_ids)))
        return len(job_ids)

    def images(self, node: str) -> list[NodeImage]:
        return [] if node in self.silent else list(self.held_images.get(node, []))

    def import_image(self, node: str, path: str, name: str) -> NodeImage:
        """An archive's digest is its path's hash; ``bad_archives`` says which a node refuses."""
        if node in self.silent:
            raise Unavailable(f"node {node} did not answer", code="node_unreachable")
        if path in self.bad_archives:
            raise InvalidInput(self.bad_archives[path], code="bad_image")
        digest = "sha256:" + hashlib.sha256(path.encode()).hexdigest()
        existing = self.held_images.get(node, [])
        before = next((i.names for i in existing if i.digest == digest), ())
        full = name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
        image = NodeImage(
            node, digest, (*(n for n in before if n != full), full), 1 << 20, "2030-01-01T00:00:00Z", False
        )
        others = [replace(i, names=tuple(n for n in i.names if n != full)) for i in existing if i.digest != digest]
        self.held_images[node] = [image, *others]
        return image

    def set_gpu_power(self, node: str, gpus: Sequence[int], setting: PowerSetting | None) -> list[str]:
        """Recorded, and obeyed by the simulated readings (``telemetry``); a sentence per GPU as a
        node says it (``power_refused``: NVML's refusal, nothing set)."""
        self.power_set.append((node, tuple(gpus), setting))
        if self.power_refused is not None:
            return [f"GPU {g} of {node}: could not set it ({self.power_refused})" for g in gpus]
        for gpu in next((n.gpus for n in self.nodes() if n.name == node), ()):
            if gpu.index in gpus:
                self.sensors.set_power(gpu.uuid, setting)
        what = "its default" if setting is None else setting.text
        return [f"GPU {g} of {node}: at {what}" for g in gpus]

    def calibrate_power(self, node: str, bound_s: float, busy: Sequence[int] = ()) -> list[dict[str, Any]]:
        """A node's curve as ``curves`` holds it (node -> its results); silent nodes refuse."""
        if node in self.silent:
            raise Unavailable(f"node {node} did not answer", code="node_unreachable")
        self.calibrated.append((node, bound_s, tuple(busy)))
        return [dict(r, node=node) for r in self.curves.get(node, [])]

    def close(self) -> None:
        pass

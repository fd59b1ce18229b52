"""The Ray backend: one node-runtime actor pinned to every Ray node, driven by the head.

Ray is the transport, the membership list and the failure detector; gpupool still decides
placement and GPU indices. Each actor claims no logical CPU or GPU (``num_cpus=0``: on a small
machine an actor that reserves a CPU can starve the node) and holds the same ``NodeRuntime``
the local executor uses, so launch, isolation, logs, exits and kills behave the same.

Actors are detached and named after the node and its Ray node id: a restarted head finds them
again with ``ray.get_actor`` and with them the workers they supervise; a node that comes back
is a new Ray node, so it gets a new actor, which first cleans what the old one left running.

Self-fencing: each actor renews a lease file while Ray still lists its node as alive. The
supervisor of every worker (``node/supervisor.py``) stops its worker when the lease goes stale,
so a node that was cut off, frozen, or whose Ray processes died stops its own work before the
head's requeued copy can start elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from gpupool.domain.errors import NotFound, Unavailable
from gpupool.domain.launch import ImagePhase, LaunchRequest, PowerSetting, Stats, WorkerExit, WorkerHandle
from gpupool.domain.nodes import Node, NodeState
from gpupool.domain.telemetry import GpuSample
from gpupool.domain.worker_env import Rendezvous
from gpupool.executors.capabilities import RAY
from gpupool.executors.ray_images import AgentImages, ExecutorImages
from gpupool.executors.ray_processes import DATA_DIR_ENV, GPUS_ENV, MODEL_ENV, NAME_LABEL, TIMEOUT_ENV
from gpupool.node.gpu.fake import DEFAULT_MODEL, FakeProbe
from gpupool.node.gpu.nvml import NvmlProbe
from gpupool.node.gpu.probe import GpuProbe
from gpupool.node.runtime import NodeRuntime
from gpupool.settings import default_data_dir, worker_base_env

log = logging.getLogger("gpupool.ray")
NAMESPACE = "gpupool"


class NodeAgent(AgentImages):
    """Runs inside the actor, on its node. Everything it knows of the node comes from the
    environment ``gpupool join`` (or the head's own ``ray start``) gave the raylet."""

    def __init__(self, name: str) -> None:
        env = os.environ
        self.node_id = ray.get_runtime_context().get_node_id()
        timeout_s = float(env.get(TIMEOUT_ENV, "10"))
        data_dir = Path(env.get(DATA_DIR_ENV) or default_data_dir(env) / "nodes" / name)
        probe: GpuProbe = NvmlProbe()
        if not probe.gpus():
            probe = FakeProbe(name, int(env.get(GPUS_ENV, "0") or 0), env.get(MODEL_ENV) or DEFAULT_MODEL)
        host_cpus = sorted(os.sched_getaffinity(0))
        base_env = worker_base_env(env)  # the allow-list: no RAY_* secret, no GPUPOOL_* of the node
        self.runtime = NodeRuntime(
            name=name,
            address=ray.util.get_node_ip_address(),
            probe=probe,
            data_dir=data_dir,
            base_env=base_env,
            cpus=len(host_cpus),
            memory_mib=os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20,
            host_cpus=host_cpus,
            lease_timeout_s=timeout_s / 2,
            detach=True,
        )
        self.cleaned = self.runtime.clean()
        self.runtime.renew_lease()
        self.lease_timeout_s = timeout_s / 2
        self._every_s = max(0.2, timeout_s / 10)
        threading.Thread(target=self._keep_lease, name="gpupool-lease", daemon=True).start()

    def describe(self) -> Node:
        """Refused while the lease is stale: such a node would fence every worker it started,
        so the head must see it silent (and in time down), not up."""
        if self.runtime.lease_expired(self.lease_timeout_s):
            raise RuntimeError(f"node {self.runtime.name} lost contact with the cluster (stale lease)")
        node = self.runtime.describe()
        node.labels["lease_timeout_s"] = str(self.lease_timeout_s)
        return node

    def free_port(self) -> int:
        return self.runtime.free_port()

    # Handles cross Ray as their stored JSON, so an agent a previous head started reads them.
    def launch(self, request: LaunchRequest) -> dict[str, Any]:
        return self.runtime.launch(request).to_json()

    def find(self, job_id: int, attempt: int, worker: int) -> dict[str, Any] | None:
        found = self.runtime.find(job_id, attempt, worker)
        return None if found is None else found.to_json()

    def poll_many(self, handles: list[dict[str, Any]]) -> list[WorkerExit | None]:
        return [self.runtime.poll(WorkerHandle.from_json(h)) for h in handles]

    def kill(self, handle: dict[str, Any]) -> None:
        self.runtime.kill(WorkerHandle.from_json(handle))

    def read_log(self, job_id: int, worker: int, offset: int) -> bytes:
        return self.runtime.read_log(job_id, worker, offset)

    def sample(self, busy: list[int]) -> list[GpuSample]:
        return self.runtime.sample(busy)

    def usage(self, handles: list[dict[str, Any]]) -> list[Stats | None]:
        return self.runtime.usage([WorkerHandle.from_json(h) for h in handles])

    def image_phases(self, handles: list[dict[str, Any]]) -> list[ImagePhase | None]:
        return self.runtime.image_phases([WorkerHandle.from_json(h) for h in handles])

    def forget(self, job_ids: list[int]) -> int:
        return self.runtime.forget(job_ids)

    def log_sizes(self) -> dict[int, int]:
        return self.runtime.log_sizes()

    def empty_logs(self, job_ids: list[int], note: str) -> int:
        return self.runtime.empty_logs(job_ids, note)

    def protect(self, endpoints: list[tuple[str, int, int]]) -> bool:
        self.runtime.protect(endpoints)
        return True

    def _keep_lease(self) -> None:
        while True:
            try:
                alive = any(n["NodeID"] == self.node_id and n["Alive"] for n in ray.nodes())
            except Exception:  # GCS unreachable: the node is cut off, let the lease go stale
                alive = False
            if alive:
                try:
                    self.runtime.renew_lease()
                except OSError:
                    log.exception("renewing the lease failed; the workers will fence themselves")
            time.sleep(self._every_s)


_Agent: Any = ray.remote(NodeAgent)


class RayExecutor(ExecutorImages):
    """The head's side: which nodes are alive, and one actor call per operation."""

    capabilities = RAY

    def __init__(self, address: str, *, node_timeout_s: float = 10.0) -> None:
        try:
            ray.init(
                address=address,
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level=logging.WARNING,
                include_dashboard=False,
            )
        except (ConnectionError, RayError, ValueError) as exc:
            raise Unavailable(f"cannot reach the Ray cluster at {address}: {exc}", code="ray_unreachable") from None
        self.address = address
        self._timeout_s = node_timeout_s
        self._call_s = max(1.0, node_timeout_s / 2)
        self._agents: dict[str, Any] = {}
        self._down: dict[str, Node] = {}
        self._silent_since: dict[str, float] = {}
        self._down_since: dict[str, float] = {}
        # A down node's workers are reported lost only once they have surely fenced themselves
        # (lease timeout, the fence's short grace, a check period, a margin): the requeued copy
        # of a gang must never overlap the old one.
        lease_s = node_timeout_s / 2
        self.fence_wait_s = lease_s + lease_s / 4 + 0.5 + 1.0
        self._actor_names: dict[str, str] = {}
        self._last: dict[str, Node] = {}
        self._lease_s: dict[str, float] = {}  # each node's own lease timeout (fixed when it joined)
        self._fenced: set[str] = set()  # actor names declared down while Ray still listed their node
        self._lock = threading.RLock()

    def nodes(self) -> list[Node]:
        """Every node Ray lists as alive and whose actor answers; the others as down."""
        alive: dict[str, dict[str, Any]] = {}
        for n in ray.nodes():
            name = (n.get("Labels") or {}).get(NAME_LABEL)
            if name and n["Alive"]:
                alive[name] = n
        out: list[Node] = []
        with self._lock:
            known = set(self._agents) | set(self._down)
            # Every actor is asked at once, so a silent node costs one timeout, not one per node.
            asked: dict[str, Any] = {}
            for name, info in alive.items():
                try:
                    asked[name] = self._ensure_agent(name, info["NodeID"]).describe.remote()
                except RayError as exc:
                    self._silent(name, exc)
            ready, _ = (
                ray.wait(list(asked.values()), num_returns=len(asked), timeout=self._call_s) if asked else ([], [])
            )
            answered = set(ready)
            for name, ref in sorted(asked.items()):
                try:
                    if ref not in answered:
                        raise GetTimeoutError(f"no answer within {self._call_s:g}s")
                    node: Node = ray.get(ref)
                except RayError as exc:
                    self._silent(name, exc)
                    continue
                self._answered(name, node)
                out.append(node)
            for name in sorted(known - set(alive)):
                self._mark_down(name, "Ray reports the node dead")
            listed = {n.name for n in out}
            # A silent node keeps its last description until it is declared down (no flapping).
            out.extend(self._last[n] for n in sorted(self._silent_since) if n in self._last and n not in listed)
            listed = {n.name for n in out}
            out.extend(self._down[name] for name in sorted(self._down) if name not in listed)
        return out

    def rendezvous(self, node: str) -> Rendezvous:
        agent = self._agent(node)
        described = self._call(node, agent.describe.remote())
        return Rendezvous(master_addr=described.address, master_port=self._call(node, agent.free_port.remote()))

    def launch(self, node: str, request: LaunchRequest) -> WorkerHandle:
        return WorkerHandle.from_json(self._call(node, self._agent(node).launch.remote(request)))

    def find(self, node: str, job_id: int, attempt: int, worker: int) -> WorkerHandle | None:
        if node in self._down:
            return None
        found: dict[str, Any] | None = self._call(node, self._agent(node).find.remote(job_id, attempt, worker))
        return None if found is None else WorkerHandle.from_json(found)

    def poll(self, node: str, handle: WorkerHandle) -> WorkerExit | None:
        """Lost once the node is down and its supervisors have surely fenced their workers."""
        with self._lock:
            if node in self._down:
                lease_s = max(self._lease_s.get(node, 0.0), self._timeout_s / 2)
                wait_s = max(self.fence_wait_s, lease_s * 1.25 + 1.5)
                fenced = time.monotonic() - self._down_since.get(node, 0.0) >= wait_s
                return WorkerExit(exit_code=None, lost=True) if fenced else None
            if node not in self._agents and not self._lookup(node):
                self._mark_down(node, "it is not part of the Ray cluster")  # e.g. it died while no head ran
                return None
            agent = self._agents[node]
        try:
            exits: list[WorkerExit | None] = ray.get(agent.poll_many.remote([handle.to_json()]), timeout=self._call_s)
        except (GetTimeoutError, RayActorError):
            return None  # the node sync decides, within the node timeout, whether the node is down
        return exits[0]

    def kill(self, node: str, handle: WorkerHandle) -> None:
        if node in self._down:
            return  # its supervisor fences the worker itself
        self._call(node, self._agent(node).kill.remote(handle.to_json()))

    def read_log(self, node: str, job_id: int, worker: int, offset: int) -> bytes:
        if node in self._down or node not in self._agents:
            return b""  # its logs are on a machine that left; never sweep the cluster for a log request
        data: bytes = self._call(node, self._agent(node).read_log.remote(job_id, worker, offset))
        return data

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        """A down node has nothing to read and a silent one would only cost a timeout."""
        samples: list[GpuSample] = self._ask(node, [], "sample", sorted(busy))
        return samples

    def usage(self, node: str, handles: Sequence[WorkerHandle]) -> list[Stats | None]:
        stats: list[Stats | None] = self._ask(node, [None] * len(handles), "usage", [h.to_json() for h in handles])
        return stats

    def image_phases(self, node: str, handles: Sequence[WorkerHandle]) -> list[ImagePhase | None]:
        none: list[ImagePhase | None] = [None] * len(handles)
        phases: list[ImagePhase | None] = self._ask(node, none, "image_phases", [h.to_json() for h in handles])
        return phases

    def forget(self, node: str, job_ids: Sequence[int]) -> int:
        # A node that comes back cleans nothing up: its data dir keeps the files.
        removed: int = self._ask(node, 0, "forget", list(job_ids))
        return removed

    def log_sizes(self, node: str) -> dict[int, int]:
        sizes: dict[int, int] = self._ask(node, {}, "log_sizes")  # a silent node's are counted once it answers
        return sizes

    def empty_logs(self, node: str, job_ids: Sequence[int], note: str) -> int:
        freed: int = self._ask(node, 0, "empty_logs", list(job_ids), note)
        return freed

    def protect(self, node: str, endpoints: Sequence[tuple[str, int, int]]) -> bool:
        # False: silent, told once it answers. An agent of an earlier head answers None: told.
        told: bool = self._ask(node, False, "protect", list(endpoints)) is not False
        return told

    def set_gpu_power(self, node: str, gpus: Sequence[int], setting: PowerSetting | None) -> list[str]:
        return [f"{node}: this head does not set GPU power limits yet"]  # a stand-in until the nodes do (pnode)

    def close(self) -> None:
        """Disconnect; the detached actors and their workers keep running for the next head."""
        ray.shutdown()

    def _ask(self, node: str, silent: Any, method: str, *args: Any) -> Any:
        """The node agent's answer to ``method(*args)``; ``silent`` for a node that is down or
        silent, without a call: it would only cost a timeout."""
        agent = self._answering(node)
        if agent is None:
            return silent
        return self._call(node, getattr(agent, method).remote(*args))

    def _answering(self, node: str) -> Any:
        """The node's agent, or None for a node that is down or silent: a call would only cost a timeout."""
        with self._lock:
            agent = self._agents.get(node)
            return None if agent is None or node in self._down or node in self._silent_since else agent

    def _ensure_agent(self, name: str, ray_node_id: str) -> Any:
        """The node's actor: re-attached by name after a head restart, else created on it. A node
        this head declared down gets a new actor (a new generation), whose start cleans up."""
        prefix = f"node-{name}-{ray_node_id[:16]}-"
        current = self._actor_names.get(name, "")
        if name in self._agents and current.startswith(prefix) and current not in self._fenced:
            return self._agents[name]
        names = [n for n in ray.util.list_named_actors() if n.startswith(prefix) and n[len(prefix) :].isdigit()]
        latest = max(names, key=lambda n: int(n[len(prefix) :]), default="")
        if latest and latest not in self._fenced:
            agent = ray.get_actor(latest, namespace=NAMESPACE)  # re-attach to what a previous head made
            actor_name = latest
        else:
            actor_name = f"{prefix}{int(latest[len(prefix) :]) + 1 if latest else 1}"
            agent = _Agent.options(
                num_cpus=0,  # an actor reserving a CPU can starve a small node
                max_restarts=0,
                max_concurrency=8,
                name=actor_name,
                namespace=NAMESPACE,
                lifetime="detached",
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=ray_node_id, soft=False),
            ).remote(name)
            self._fenced.discard(actor_name)
        self._agents[name] = agent
        self._actor_names[name] = actor_name
        return agent

    def _answered(self, name: str, node: Node) -> None:
        self._silent_since.pop(name, None)
        self._down.pop(name, None)
        self._down_since.pop(name, None)
        self._last[name] = node
        self._lease_s[name] = float(node.labels.get("lease_timeout_s", self._timeout_s / 2))

    def _silent(self, name: str, exc: Exception) -> None:
        """A dead actor means a dead node at once; a silent or failing one gets the node timeout.

        A node declared down while Ray still lists it may still be renewing its lease: its actor
        is killed, so the renewals stop and its workers fence themselves before the head's
        fence wait ends, and the node's Ray id is remembered, so that if it answers again it
        gets a new actor, which cleans up before it takes work."""
        first = self._silent_since.setdefault(name, time.monotonic())
        if not isinstance(exc, ActorDiedError) and time.monotonic() - first < self._timeout_s:
            return
        agent = self._agents.get(name)
        if agent is not None:
            with contextlib.suppress(Exception):
                ray.kill(agent, no_restart=True)
        actor_name = self._actor_names.get(name, "")
        if actor_name:
            self._fenced.add(actor_name)
        self._mark_down(name, f"its node runtime does not answer ({type(exc).__name__})")

    def _mark_down(self, name: str, why: str) -> None:
        if name in self._agents:
            log.warning("node %s is down: %s", name, why)
        self._agents.pop(name, None)
        self._actor_names.pop(name, None)
        self._silent_since.pop(name, None)
        if name not in self._down:
            self._down_since[name] = time.monotonic()
            self._down[name] = Node(name, NodeState.DOWN, "", (), 0, 0, {"reason": why})

    def _lookup(self, name: str) -> bool:
        """After a head restart the first calls may come before the first node sync."""
        self.nodes()
        return name in self._agents

    def _agent(self, node: str) -> Any:
        with self._lock:
            if node not in self._agents and not self._lookup(node):
                raise NotFound(f"node {node} is not an up node of this Ray cluster", code="node_not_found")
            return self._agents[node]

    def _call(self, node: str, ref: Any, timeout_s: float | None = None) -> Any:
        try:
            return ray.get(ref, timeout=timeout_s or self._call_s)
        except (GetTimeoutError, RayActorError) as exc:
            raise Unavailable(f"node {node} did not answer: {type(exc).__name__}", code="node_unreachable") from None

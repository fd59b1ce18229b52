"""What each backend can do, declared as data: callers that need an ability ask for it here
instead of assuming it from the backend's name.

Declared in one Ray-free module (not beside ``RayExecutor``) so that asking what the Ray backend
can do never imports Ray.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Capabilities:
    multi_host: bool  # its nodes may be different machines (else: virtual nodes on the head's machine)
    node_join: bool  # machines join while the head runs (`gpupool join`); the head hands out how
    node_loss: bool  # a node can go down: it is reported DOWN and its workers lost (after fencing)
    self_fencing: bool  # a node cut off from the cluster stops its own workers (the lease)
    simulated_nodes: bool  # `--fake-nodes` / `--fake-hardware` describe its nodes


LOCAL = Capabilities(multi_host=False, node_join=False, node_loss=False, self_fencing=False, simulated_nodes=True)
RAY = Capabilities(multi_host=True, node_join=True, node_loss=True, self_fencing=True, simulated_nodes=False)

"""The Ray backend's GPU power call (issue 33), apart from ``ray.py`` so that each module stays
small: ``AgentPower`` is mixed into the node agent (the actor, on its node), ``ExecutorPower`` into
the head's ``RayExecutor``, which supplies ``_ask``.

A node that is down or silent, or whose agent an earlier head started without this call, is not
asked: the answer says its GPUs were left as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpupool.domain.errors import Unavailable
from gpupool.domain.launch import PowerSetting
from gpupool.node.runtime import NodeRuntime


class AgentPower:
    runtime: NodeRuntime

    def set_gpu_power(self, gpus: list[int], setting: PowerSetting | None) -> list[str]:
        return self.runtime.power.throttle(gpus, setting)


class ExecutorPower:
    def _ask(self, node: str, silent: Any, method: str, *args: Any) -> Any:
        raise NotImplementedError

    def set_gpu_power(self, node: str, gpus: Sequence[int], setting: PowerSetting | None) -> list[str]:
        unasked = [f"node {node} did not answer: the power of its GPUs {list(gpus)} was left as it was"]
        try:
            said: list[str] = self._ask(node, unasked, "set_gpu_power", list(gpus), setting)
        except Unavailable:
            return unasked
        except AttributeError:  # an agent an earlier head started, from before this call
            return [f"node {node} cannot set GPU power (its node agent predates it); left as it was"]
        return said

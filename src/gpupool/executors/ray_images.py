"""The Ray backend's image calls (issue 32), apart from ``ray.py`` so that each module stays small:
``AgentImages`` is mixed into the node agent (the actor, on its node), ``ExecutorImages`` into the
head's ``RayExecutor``, which supplies ``_ask``, ``_answering`` and ``_call``.

An import unpacks a whole archive on the node, which takes far longer than any other call: it
gets a timeout of its own. A node's refusal (not an OCI image...) crosses Ray as its sentence, not
as an exception, so the head raises the same ``InvalidInput`` the local backend does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpupool.domain.errors import InvalidInput, Unavailable
from gpupool.domain.images import NodeImage
from gpupool.node.runtime import NodeRuntime

IMPORT_TIMEOUT_S = 1800.0  # a large image's archive, read from a shared file system and unpacked


class AgentImages:
    runtime: NodeRuntime

    def images(self) -> list[NodeImage]:
        return self.runtime.image_cache.listing()

    def calibrate_power(self, bound_s: float, busy: list[int]) -> list[dict[str, Any]]:
        return self.runtime.calibrate_power(bound_s, busy)

    def import_image(self, path: str, name: str) -> NodeImage | str:
        """The image imported, or the node's sentence why it could not be."""
        try:
            return self.runtime.image_cache.import_archive(path, name)
        except InvalidInput as exc:
            return exc.message


class ExecutorImages:
    def _ask(self, node: str, silent: Any, method: str, *args: Any) -> Any:
        raise NotImplementedError

    def _answering(self, node: str) -> Any:
        raise NotImplementedError

    def _call(self, node: str, ref: Any, timeout_s: float | None = None) -> Any:
        raise NotImplementedError

    def images(self, node: str) -> list[NodeImage]:
        held: list[NodeImage] = self._ask(node, [], "images")  # a silent node is listed once it answers
        return held

    def calibrate_power(self, node: str, bound_s: float, busy: Sequence[int] = ()) -> list[dict[str, Any]]:
        """Each of the node's GPU models takes up to ``bound_s``: the call's own timeout allows eight."""
        agent = self._answering(node)
        if agent is None:
            raise Unavailable(f"node {node} is down or does not answer", code="node_unreachable")
        got: list[dict[str, Any]] = self._call(
            node, agent.calibrate_power.remote(bound_s, list(busy)), 8 * bound_s + 60
        )
        return got

    def import_image(self, node: str, path: str, name: str) -> NodeImage:
        agent = self._answering(node)
        if agent is None:
            raise Unavailable(f"node {node} is down or does not answer", code="node_unreachable")
        got: NodeImage | str = self._call(node, agent.import_image.remote(path, name), IMPORT_TIMEOUT_S)
        if isinstance(got, str):
            raise InvalidInput(got, code="bad_image")
        return got

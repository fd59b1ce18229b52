"""The walls the controller keeps up to date on the nodes: the port wall (each node is handed the
ports the others serve, ``controller/ports.py``) and the cap on each user's logs
(``controller/user_logs.py``). Both act only when something changed or their refresh is due."""

from __future__ import annotations

from gpupool.controller.steps.parts import Parts, PartsStep


class PushPorts(PartsStep):
    """Runs after settling and again after the scheduling cycle: a replica that just started is
    walled from the other nodes' jobs in the tick that started it."""

    def __init__(self, parts: Parts, name: str = "ports") -> None:
        super().__init__(parts)
        self.name = name

    def run(self, now: float) -> bool:
        self._parts.ports.push(self._parts.shared.nodes)
        return False


class CapUserLogs(PartsStep):
    """After settling: the jobs that just ended read finished, so their logs may be emptied now."""

    name = "user-logs"

    def run(self, now: float) -> bool:
        self._parts.user_logs.check(self._parts.shared.nodes)
        return False

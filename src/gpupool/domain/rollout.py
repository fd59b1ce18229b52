"""What the service reconciler does with one service's replicas: how many new ones to submit and
which to stop. Pure, so the rules below are tested as a table rather than through processes.

- Replicas that ended are simply gone: the count falls short and new ones are submitted.
- A rolling update (replicas whose spec is not the current version) surges by one: one new replica
  is started, and an old one is stopped only once the ready replicas exceed the desired count. So
  while old replicas stay healthy, the ready count never drops below ``desired`` during a roll.
- Old replicas that are not ready hold no capacity: they are stopped at once.
- Scaling down stops the surplus, those not ready first, then the newest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain.services import Replica

SURGE = 1


@dataclass(frozen=True, slots=True)
class Plan:
    submit: int
    stop: tuple[int, ...]  # job ids
    reason: str

    @property
    def idle(self) -> bool:
        return not self.submit and not self.stop


def plan(desired: int, replicas: Sequence[Replica]) -> Plan:
    """``replicas``: the service's unfinished replica jobs (those already stopping included)."""
    alive = [r for r in replicas if not r.stopping]
    current = [r for r in alive if r.current]
    old = [r for r in alive if not r.current]
    stop: list[int] = [r.job_id for r in old if not r.ready]
    old = [r for r in old if r.ready]
    ready = sum(1 for r in alive if r.ready)
    # Old ready replicas go one by one, as the ready count allows.
    for r in sorted(old, key=lambda r: r.job_id):
        if ready <= desired:
            break
        stop.append(r.job_id)
        old.remove(r)
        ready -= 1
    if old and desired == 0:
        stop.extend(r.job_id for r in old)
        old = []
    surplus = len(current) - desired
    if surplus > 0:
        # Not ready first, then the newest (highest id).
        order = sorted(current, key=lambda r: (r.ready, -r.job_id))
        stop.extend(r.job_id for r in order[:surplus])
        return Plan(0, tuple(stop), f"scaling down to {desired}: stopping {surplus} replica(s)")
    missing = desired - len(current)
    room = desired + (SURGE if old else 0) - len(current) - len(old)
    submit = max(0, min(missing, room))
    if old:
        reason = f"rolling update: {len(current)} of {desired} replicas on the new version, {len(old)} old"
    elif submit:
        reason = f"{len(current)} of {desired} replicas: starting {submit}"
    else:
        reason = f"{len(current)} of {desired} replicas"
    return Plan(submit, tuple(stop), reason)

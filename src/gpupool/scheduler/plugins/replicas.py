"""Replica spread: a service's replicas go on different nodes where they can, so that one node
going down does not take the whole service with it. A node penalty (``hooks.NodePenalty``): a
node that holds a replica of the job's service, running or started earlier in the cycle, is
taken only when no other node fits; any node will do then. A job that is not a replica gets no
penalty, so every other job is placed as without this hook."""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.hooks import NodePenalty
from gpupool.scheduler.session import Session


def spread(session: Session) -> NodePenalty:
    """The penalty for one session. The nodes of the running replicas are gathered at the first
    replica placed; this cycle's starts are read as they come (``session.starts`` only grows)."""
    nodes: dict[str, set[str]] | None = None
    seen = 0  # starts already read

    def penalty(job: PendingJob) -> Mapping[str, int]:
        nonlocal nodes, seen
        service = job.spec.service
        if service is None:
            return {}
        if nodes is None:
            nodes = {}
            for r in session.snapshot.running:
                if r.spec.service is not None and not r.stopping:
                    nodes.setdefault(r.spec.service, set()).update(p.node for p in r.placements)
        for start in session.starts[seen:]:
            started = session.started_jobs[start.job_id].spec.service
            if started is not None:
                nodes.setdefault(started, set()).update(p.node for p in start.placements)
        seen = len(session.starts)
        return dict.fromkeys(nodes.get(service, ()), 1)

    return penalty

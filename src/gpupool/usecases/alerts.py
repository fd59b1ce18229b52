"""Alert and idle-GPU use cases: what is wrong, and which GPUs sit idle, for any authenticated user."""

from __future__ import annotations

from gpupool.domain.alerts import Alert
from gpupool.store import alerts as alert_repo
from gpupool.store import idle as idle_repo
from gpupool.store.idle import IdleGpu
from gpupool.usecases.context import HeadContext


def alerts(ctx: HeadContext, include_cleared: bool = False) -> list[Alert]:
    with ctx.db.read() as s:
        return alert_repo.listing(s, include_cleared)


def idle_gpus(ctx: HeadContext) -> list[IdleGpu]:
    """GPUs allocated to a job and idle for at least the head's idle time (``gpupool up --idle-after``)."""
    with ctx.db.read() as s:
        return idle_repo.idle_gpus(s, ctx.clock.now(), ctx.idle.after_s)

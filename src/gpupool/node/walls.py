"""What a node enforces around each job, found once when its runtime starts: the cgroup layout
its workers are confined in, if any, and the same said plainly for ``gpupool nodes``."""

from __future__ import annotations

import os

from gpupool.node import accounts, cgroups


def isolation(layout: cgroups.Layout | None, as_owners: bool) -> dict[str, str]:
    """What this node enforces around each job, said plainly: the cgroup mechanisms where workers
    get a group; otherwise the per-process limits, with how a job gets past them."""
    users = "setuid (each job runs as its owner's Unix account)"
    if not as_owners:
        users = f"none (single-user: every job runs as {accounts.me()})"
    if layout is not None:
        return {"users": users, **layout.isolation()}
    return {
        "users": users,
        "memory": "rlimit data, per process (a shared mapping or a child escapes it)",
        "cpus": "affinity (a job can widen it)",
        "cpu quota": "none (a fraction of a core is not held to it)",
        "devices": "none (CUDA_VISIBLE_DEVICES only)",
        "kill": "process group (a new session escapes it)",
    }


def confinement(wanted: bool = True) -> cgroups.Layout | None:
    """The cgroup layout workers are confined in, or None: not wanted, not root (only root may
    make groups and move processes into them), or no hierarchy where gpupool can make its group."""
    if not wanted or os.geteuid() != 0:
        return None
    try:
        layout = cgroups.detect()
    except OSError:
        return None
    return layout if any(v != "none" for v in layout.isolation().values()) else None

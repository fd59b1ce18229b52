"""Why a worker ended, when its node knows more than an exit code: the names the node records
(``exit.json``), the API returns (``exit_reason``) and the metric counts, each with what it means
for the person who reads it. The node writes the plain strings: its code imports no domain module."""

from __future__ import annotations

OOM = "oom"  # killed by its cgroup at its --memory limit
GPU_OOM = "gpu_oom"  # stopped for using more GPU memory than its share of a shared GPU
NO_UNIX_ACCOUNT = "no_unix_account"  # its owner has no Unix account on the node: never started
IMAGE = "image"  # its --image could not be got or used on the node (the reason in its events): never started
# The node could not get its image now (a path not there, a registry not answering): it waits, requeued
IMAGE_UNAVAILABLE = "image_unavailable"
SHRUNK = "shrunk"  # stopped by its elastic job's shrink (issue 35): the job runs on without it

MEANING = {
    OOM: "out of memory: its --memory limit",
    GPU_OOM: "over its share of GPU memory: its --gpu-memory",
    NO_UNIX_ACCOUNT: "its owner has no Unix account on the node",
    IMAGE: "its image could not be got or used on the node",
    IMAGE_UNAVAILABLE: "its image could not be got on the node now: it waits for it",
    SHRUNK: "stopped to shrink its elastic job, which runs on without it",
}
KILLED = (OOM, GPU_OOM)  # reasons the node ended a worker that ran: counted by gpupool_worker_kills_total


def explain(exit_code: int | None, reason: str | None) -> str:
    """An exit code as people read it: with what the node knows of why, if anything."""
    code = "-" if exit_code is None else str(exit_code)
    meaning = MEANING.get(reason or "")
    return f"{code} ({meaning})" if meaning else code

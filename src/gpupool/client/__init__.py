"""The Python SDK the CLI uses: a thin httpx wrapper over /api/v1. ``JobSpec`` is the job a
script builds and submits (``GpupoolClient.submit(JobSpec.create(...))``).

The names are loaded when first used (PEP 562): importing ``gpupool.client.errors`` for the CLI's
error handling then costs nothing of the HTTP client or the job types (~50 ms)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpupool.client.http import ClientError, GpupoolClient, HeadUnreachable
    from gpupool.domain.jobs import JobSpec, Submission

__all__ = ["ClientError", "GpupoolClient", "HeadUnreachable", "JobSpec", "Submission"]

_WHERE = {
    "ClientError": "gpupool.client.errors",
    "HeadUnreachable": "gpupool.client.errors",
    "GpupoolClient": "gpupool.client.http",
    "JobSpec": "gpupool.domain.jobs",
    "Submission": "gpupool.domain.jobs",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # looked up once
    return value

"""The Python SDK the CLI uses: a thin httpx wrapper over /api/v1. ``JobSpec`` is the job a
script builds and submits (``GpupoolClient.submit(JobSpec.create(...))``)."""

from gpupool.client.http import ClientError, GpupoolClient, HeadUnreachable
from gpupool.domain.jobs import JobSpec, Submission

__all__ = ["ClientError", "GpupoolClient", "HeadUnreachable", "JobSpec", "Submission"]

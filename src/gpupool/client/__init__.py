"""The Python SDK the CLI uses: a thin httpx wrapper over /api/v1."""

from gpupool.client.http import ClientError, GpupoolClient, HeadUnreachable

__all__ = ["ClientError", "GpupoolClient", "HeadUnreachable"]

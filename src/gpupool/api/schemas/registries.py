"""Registry login models (``gpupool login --registry``): a secret goes in, never comes out."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.registries import MAX_SECRET, MAX_USERNAME, RegistryLogin


class RegistryLoginSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=MAX_USERNAME, description="the registry user ($oauthtoken for NGC)")
    password: str = Field(
        min_length=1,
        max_length=MAX_SECRET,
        description="the password or access token; kept sealed, used only by the nodes' pulls of your jobs' images",
    )


class RegistryLoginOut(BaseModel):
    registry: str = Field(description="the registry host (docker.io for Docker Hub)")
    username: str
    saved_at: datetime

    @classmethod
    def of(cls, login: RegistryLogin) -> RegistryLoginOut:
        return cls(registry=login.registry, username=login.username, saved_at=login.saved_at)

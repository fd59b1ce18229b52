"""/api/v1/registries: the caller's own logins to image registries (issue 32), which the
nodes use to pull the images of the caller's jobs. The password goes in and never comes back."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.registries import RegistryLoginOut, RegistryLoginSet
from gpupool.usecases import registry_logins as login_service

router = APIRouter(prefix="/api/v1/registries", tags=["images"])
Registry = Annotated[str, Path(min_length=1, max_length=260, description="a registry host: nvcr.io, registry.lab:5000")]


@router.get("", response_model=list[RegistryLoginOut])
def listing(ctx: Ctx, who: Caller) -> list[RegistryLoginOut]:
    """The registries the caller logged in to, and as whom."""
    return [RegistryLoginOut.of(login) for login in login_service.listing(ctx, who)]


@router.put("/{registry}", response_model=RegistryLoginOut)
def login(registry: Registry, body: RegistryLoginSet, ctx: Ctx, who: Caller) -> RegistryLoginOut:
    """Keep (or replace) the caller's login to ``registry``."""
    return RegistryLoginOut.of(login_service.login(ctx, who, registry, body.username, body.password))


@router.delete("/{registry}", status_code=204)
def logout(registry: Registry, ctx: Ctx, who: Caller) -> Response:
    """Forget the caller's login to ``registry``."""
    login_service.logout(ctx, who, registry)
    return Response(status_code=204)

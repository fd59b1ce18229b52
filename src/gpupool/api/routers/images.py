"""/api/v1/images: what each node's image cache holds, and (admin) importing an OCI archive onto
every node (issue 32)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gpupool.api import auditing
from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.images import ImagesOut, ImportOut, ImportRequest, NodeImportOut
from gpupool.usecases import images as image_service

router = APIRouter(prefix="/api/v1/images", tags=["images"])


@router.get("", response_model=ImagesOut)
def listing(ctx: Ctx, who: Caller) -> ImagesOut:
    """Every image every node holds; nodes that are down or silent are listed under ``skipped``."""
    return ImagesOut.of(image_service.listing(ctx))


@router.post("", response_model=ImportOut)
def import_image(body: ImportRequest, request: Request, ctx: Ctx, who: Caller) -> ImportOut:
    """Unpack the archive on every node that is up, as ``name``: jobs then run in it with
    ``--image NAME``. A node that is down gets it only from another import once it is back."""
    auditing.set_target(request, f"image {body.name} from {body.path}")  # the log says which image
    done = image_service.import_image(ctx, who, body.path, body.name)
    return ImportOut(path=body.path, name=body.name, nodes=[NodeImportOut.of(d) for d in done])

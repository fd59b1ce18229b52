"""/api/v1/users and /api/v1/tokens: people and their tokens."""

from __future__ import annotations

from fastapi import APIRouter, Response

from gpupool.api.deps import Caller, Ctx, forget_principals
from gpupool.api.params import TokenId
from gpupool.api.schemas.users import (
    RoleSet,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UnixUserSet,
    UserAdd,
    UserCreated,
    UserOut,
)
from gpupool.usecases import users as user_service

router = APIRouter(prefix="/api/v1", tags=["users"])


@router.get("/users", response_model=list[UserOut])
def listing(ctx: Ctx, who: Caller) -> list[UserOut]:
    return [UserOut.of(u, projects) for u, projects in user_service.listing(ctx, who)]


@router.post("/users", response_model=UserCreated, status_code=201)
def add_user(body: UserAdd, ctx: Ctx, who: Caller, response: Response) -> UserCreated:
    user, made = user_service.add_user(
        ctx, who, body.name, body.role, body.unix_user, shared_account=body.shared_account
    )
    response.headers["Location"] = f"/api/v1/users/{user.name}"  # the audit log's target, too
    return UserCreated(**UserOut.of(user).model_dump(), token=made.token)


@router.post("/users/{name}/disable", response_model=UserOut)
def disable(name: str, ctx: Ctx, who: Caller) -> UserOut:
    user = user_service.set_disabled(ctx, who, name, True)
    forget_principals()
    return UserOut.of(user)


@router.post("/users/{name}/enable", response_model=UserOut)
def enable(name: str, ctx: Ctx, who: Caller) -> UserOut:
    return UserOut.of(user_service.set_disabled(ctx, who, name, False))


@router.put("/users/{name}/role", response_model=UserOut)
def set_role(name: str, body: RoleSet, ctx: Ctx, who: Caller) -> UserOut:
    user = user_service.set_role(ctx, who, name, body.role)
    forget_principals()
    return UserOut.of(user)


@router.put("/users/{name}/unix-user", response_model=UserOut)
def set_unix_user(name: str, body: UnixUserSet, ctx: Ctx, who: Caller) -> UserOut:
    user = user_service.set_unix_user(ctx, who, name, body.unix_user, shared_account=body.shared_account)
    forget_principals()
    return UserOut.of(user)


@router.delete("/users/{name}", status_code=204, response_class=Response)
def delete_user(name: str, ctx: Ctx, who: Caller) -> Response:
    user_service.delete_user(ctx, who, name)
    forget_principals()
    return Response(status_code=204)


@router.get("/tokens", response_model=list[TokenOut])
def tokens(ctx: Ctx, who: Caller, user: str | None = None) -> list[TokenOut]:
    return [TokenOut.of(t) for t in user_service.list_tokens(ctx, who, user)]


@router.post("/tokens", response_model=TokenCreated, status_code=201)
def create_token(body: TokenCreate, ctx: Ctx, who: Caller, response: Response) -> TokenCreated:
    made = user_service.create_token(
        ctx, who, user=body.user, name=body.name, scope=body.scope, expires_in_s=body.expires_in_s
    )
    response.headers["Location"] = f"/api/v1/tokens/{made.info.id}"  # the audit log's target, too
    return TokenCreated(**TokenOut.of(made.info).model_dump(), token=made.token)


@router.delete("/tokens/{token_id}", response_model=TokenOut)
def revoke_token(token_id: TokenId, ctx: Ctx, who: Caller) -> TokenOut:
    revoked = user_service.revoke_token(ctx, who, token_id)
    forget_principals()
    return TokenOut.of(revoked)

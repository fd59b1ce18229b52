"""User and token request/response models. A token's plain text appears only in ``TokenCreated``."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.permissions import ProjectRole
from gpupool.domain.users import MAX_TOKEN_NAME, MAX_UNIX_USER, Role, Scope, TokenInfo, User, effective_scope
from gpupool.store.tokens import Principal


class UserAdd(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63)
    role: Role = Role.MEMBER
    unix_user: str | None = Field(None, max_length=MAX_UNIX_USER)
    shared_account: bool = Field(False, description="allow a Unix account another user's jobs already run as")


class UnixUserSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    unix_user: str | None = Field(description="null: the Unix account of the user's own name", max_length=MAX_UNIX_USER)
    shared_account: bool = Field(False, description="allow a Unix account another user's jobs already run as")


class RoleSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role


class UserOut(BaseModel):
    name: str
    role: Role
    unix_user: str | None
    projects: list[str] = Field(default_factory=list, description="projects the user is a member or manager of")
    created_at: datetime
    disabled: bool

    @classmethod
    def of(cls, u: User, projects: list[str] | None = None) -> UserOut:
        return cls(
            name=u.name,
            role=u.role,
            unix_user=u.unix_user,
            projects=projects or [],
            created_at=u.created_at,
            disabled=u.disabled,
        )


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str | None = Field(None, max_length=63, description="whose token; the caller by default")
    name: str | None = Field(None, max_length=MAX_TOKEN_NAME)
    scope: Scope | None = Field(None, description="read, submit or admin; the widest the user's role allows by default")
    expires_in_s: float | None = Field(None, description="seconds until it expires (1 minute to 10 years); null: never")


class TokenOut(BaseModel):
    id: int
    name: str | None
    user: str
    scope: str | None
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None

    @classmethod
    def of(cls, t: TokenInfo) -> TokenOut:
        return cls.model_validate(t, from_attributes=True)


class TokenCreated(TokenOut):
    token: str = Field(description="the token itself: shown this once, stored only as a hash")


class UserCreated(UserOut):
    token: str = Field(description="the user's first token: shown this once, stored only as a hash")


class WhoAmI(BaseModel):
    user: str
    role: str
    scope: Scope = Field(description="what this token may do: its own scope narrowed to the user's role")
    is_admin: bool = Field(description="an admin acting through a token of scope admin")
    projects: dict[str, ProjectRole] = Field(
        default_factory=dict, description="the projects the user belongs to, and their role in each"
    )

    @classmethod
    def of(cls, who: Principal, projects: dict[str, ProjectRole]) -> WhoAmI:
        scope = effective_scope(who.role, who.scope.value if who.scope else None)
        return cls(user=who.user, role=who.role, scope=scope, is_admin=who.is_admin, projects=projects)

"""Audit log response model."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from gpupool.domain.audit import AuditEntry


class AuditOut(BaseModel):
    id: int
    at: datetime
    user: str | None = Field(description="null for a failed sign-in")
    token_id: int | None = Field(description="the id of the token used (gpupool token list), never the token")
    action: str = Field(description="what was asked, named after the route: jobs.submit, nodes.drain, auth.failed")
    target: str = Field(description="what it was asked of: job 12, node n1, user bob")
    result: str = Field(description="ok, denied (401, 403), invalid (another 4xx) or failed (5xx)")
    status: int = Field(description="the HTTP status answered")
    client: str | None = Field(description="the client's address")

    @classmethod
    def of(cls, e: AuditEntry) -> AuditOut:
        return cls(
            id=e.id or 0,
            at=e.at,
            user=e.user,
            token_id=e.token_id,
            action=e.action,
            target=e.target,
            result=e.result.value,
            status=e.status,
            client=e.client,
        )

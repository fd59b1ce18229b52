"""Who may do what: admin-only operations say so in one line."""

from __future__ import annotations

from gpupool.domain.errors import Forbidden
from gpupool.store.tokens import Principal


def require_admin(who: Principal, what: str) -> None:
    if not who.is_admin:
        raise Forbidden(f"only an admin may {what}; {who.user} is a {who.role}")

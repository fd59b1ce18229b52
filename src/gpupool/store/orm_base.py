"""The declarative base every table derives from, and the one column type it maps datetimes to:
apart from ``orm.py`` so the table modules (``orm.py``, ``orm_telemetry.py``) share it without
importing each other in a circle."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase


class UtcDateTime(TypeDecorator[datetime]):
    """Always timezone-aware UTC on the way out, whatever the engine stores (SQLite keeps none)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use an aware UTC time")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: dict[Any, Any] = {datetime: UtcDateTime}

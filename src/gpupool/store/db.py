"""Engine creation and schema migration (Alembic, run programmatically at start-up)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeAlias

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.pool import ConnectionPoolEntry

from gpupool.domain.errors import InvalidInput, Stale, Unavailable

MIGRATIONS = Path(__file__).parent / "migrations"

# One open transaction, as repo functions take it. Code outside the store names the type so and
# never imports SQLAlchemy itself (``tests/unit/test_layers.py``).
Tx: TypeAlias = Session


def make_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InvalidInput(
            f"malformed database URL {url!r}: use e.g. sqlite:///path/db.sqlite or postgresql+psycopg://user@host/db"
        ) from None
    try:
        parsed.get_dialect()
    except NoSuchModuleError:
        raise InvalidInput(
            f"unknown database driver in {url!r}: use sqlite:///PATH or postgresql+psycopg://..."
        ) from None
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=10)


def _sqlite_pragmas(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
    # WAL lets the API read while the controller writes; busy_timeout waits instead of failing.
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision. Safe to call at every start."""
    try:
        with engine.begin() as connection:
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")
    except OperationalError as exc:
        reason = " ".join(str(exc.orig).split())
        where = engine.url.render_as_string(hide_password=True)
        raise Unavailable(f"cannot open the database {where}: {reason}") from None


class Database:
    """An engine and short transactions over it. Repos are functions over the session given."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def tx(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back if it raises. A guarded
        write that found its row changed since it was read (``orm.JobRow``) raises ``Stale``."""
        try:
            with self._sessions() as session, session.begin():
                yield session
        except StaleDataError:
            raise Stale("a job changed while this was being decided; nothing was written, try again") from None

    def migrate(self) -> None:
        migrate(self.engine)

    def close(self) -> None:
        self.engine.dispose()

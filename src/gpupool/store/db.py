"""Engine creation and schema migration (Alembic, run programmatically at start-up)."""

from __future__ import annotations

import os
import stat
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
        if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
            _private_sqlite_file(Path(parsed.database))
        engine = create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=10)


def _private_sqlite_file(path: Path) -> None:
    """The database holds token hashes and every job's spec: 0600 from its first byte (created here,
    empty, before SQLite opens it; its -wal and -shm files take its mode). One found wider is made so."""
    if not path.parent.is_dir():
        return  # SQLite says why it cannot open it
    for each in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        flags = os.O_RDONLY | (os.O_CREAT if each == path else 0)
        try:
            fd = os.open(each, flags, 0o600)
        except OSError:
            continue  # absent, or not ours to open: SQLite says what it makes of it
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if mode & 0o077:
                os.fchmod(fd, mode & 0o700)
        finally:
            os.close(fd)


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

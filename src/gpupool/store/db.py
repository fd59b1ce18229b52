"""Engine creation and schema migration (Alembic, run programmatically at start-up)."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeAlias

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.pool import ConnectionPoolEntry

from gpupool.domain.errors import Conflict, InvalidInput, Stale, Unavailable

MIGRATIONS = Path(__file__).parent / "migrations"
logger = logging.getLogger("gpupool.store")

# One open transaction, as repo functions take it. Code outside the store names the type so and
# never imports SQLAlchemy itself (``tests/architecture/test_layers.py``).
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
        event.listen(engine, "begin", _sqlite_begin)
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
    # synchronous=FULL: a commit is on disk before the head answers, so an acknowledged submission
    # survives a power cut, not only a crash of the head (docs/reference/errors.md, "Durability", has the cost).
    # isolation_level=None: pysqlite starts no transaction of its own; ``_sqlite_begin`` does.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


READ_ONLY = "gpupool_read_only"  # an execution option: the transaction only reads


def _sqlite_begin(conn: Connection) -> None:
    """Every transaction that may write takes SQLite's write lock when it begins (BEGIN IMMEDIATE),
    not at its first write: two read-then-write transactions (a cancel and a start, two changes of
    one project) then run one after the other instead of both deciding on the same old read, and a
    writer waits (busy_timeout) instead of failing with SQLITE_BUSY_SNAPSHOT halfway. Read-only
    transactions (``Database.read``) open none, as pysqlite never did for reads: each query reads
    the latest commit and none waits for a writer (measured: a BEGIN and COMMIT around each read
    cost the API ~10 % of its request rate). Sent on the driver's connection: through SQLAlchemy's
    execution path, a BEGIN costs more than the query it guards."""
    if not conn.get_execution_options().get(READ_ONLY):
        conn.connection.driver_connection.execute("BEGIN IMMEDIATE")  # type: ignore[union-attr]


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


def _unavailable(exc: OperationalError) -> Unavailable:
    """A database that cannot serve the transaction now: a 503 that says why (its disk is full,
    it is busy, it cannot be reached), never a 500. Nothing was written: the transaction rolled back
    whole, and the next one tries again (PostgreSQL connections are checked before use)."""
    reason = " ".join(str(exc.orig).split())
    if "disk is full" in reason or "No space left" in reason or "could not extend file" in reason:
        logger.error("the database's disk is full: %s", reason)
        return Unavailable(
            "the head's database has no disk space left; nothing was written: free space on its disk and retry",
            code="disk_full",
        )
    if "database is locked" in reason:
        return Unavailable("the head's database stayed busy for 30 s; nothing was written: retry", code="database_busy")
    logger.error("the database cannot be reached: %s", reason)
    return Unavailable(
        f"the head cannot reach its database ({reason[:200]}); nothing was written: retry once it is back",
        code="database_unavailable",
    )


class Database:
    """An engine and short transactions over it. Repos are functions over the session given."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._readers = sessionmaker(self.engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False)
        # SQLite: one writer at a time. Writers of this process queue on a lock, woken the moment
        # it is free, rather than on SQLite's busy handler, which polls with sleeps of up to 100 ms.
        self._one_writer = threading.Lock() if self.engine.dialect.name == "sqlite" else contextlib.nullcontext()

    @property
    def one_writer(self) -> bool:
        """Whether writers take turns (SQLite): what a transaction read stays true until it commits."""
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def tx(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back if it raises. A guarded
        write that found its row changed since it was read (``orm.JobRow``) raises ``Stale``."""
        try:
            with self._one_writer, self._sessions() as session, session.begin():
                yield session
        except StaleDataError:
            raise Stale("a job changed while this was being decided; nothing was written, try again") from None
        except OperationalError as exc:
            raise _unavailable(exc) from None
        except IntegrityError as exc:  # two requests made the same thing at once: the loser says so
            logger.info("a transaction lost a race and was rolled back: %s", exc.orig)
            raise Conflict(
                "someone changed the same thing at the same moment; nothing was written, try again",
                code="concurrent_change",
            ) from None

    @contextmanager
    def read(self) -> Iterator[Session]:
        """Queries that only read (listings, reports, metrics, the scheduler's snapshot): on SQLite
        they take no lock and never wait behind a writer, each seeing the latest commit, as reads
        always did here (the scheduler's decisions are written guarded, ``Stale``, for that reason).
        On PostgreSQL: one READ COMMITTED transaction. Never write in it: use ``tx``."""
        try:
            with self._readers() as session, session.begin():
                yield session
        except OperationalError as exc:
            raise _unavailable(exc) from None

    def migrate(self) -> None:
        migrate(self.engine)

    def close(self) -> None:
        self.engine.dispose()

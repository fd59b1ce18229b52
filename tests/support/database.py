"""Database fixtures, a pytest plugin (tests/conftest.py loads it, so any folder's tests may take
them): every test taking ``db`` or ``db_url`` runs twice, on SQLite and on a real PostgreSQL server;
``now`` is a fixed time and ``ctx`` a HeadContext over ``db`` (what the use cases take).

The PostgreSQL server is started once per test session by ``scripts/postgres.sh`` in a private
data directory on a free port and stopped at the end; each test gets a database of its own:
``db_url`` an empty one, ``db`` a copy of one the migrations brought from nothing to the newest
revision once per session and engine (a PostgreSQL template, a SQLite file), which is the same
schema and rows as migrating each, ~0.15 s sooner for each of the hundreds of tests. Set
``GPUPOOL_TEST_PG_URL`` (a SQLAlchemy URL of a database on a server where CREATE DATABASE is allowed) to use a server
of your own instead. If no server can be started, the PostgreSQL half of the tests is skipped
with the script's reason.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL, make_url

from gpupool.store.db import Database
from gpupool.usecases.context import HeadContext

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "postgres.sh"
# Installing the postgresql package can take minutes on a bare machine.
START_TIMEOUT_S = 900
_names = itertools.count(1)

NOW = datetime(2026, 3, 14, 15, 9, 26, 535897, tzinfo=UTC)


@pytest.fixture
def ctx(db: Database, now: datetime) -> HeadContext:
    """The use cases' context over ``db`` at a fixed time, with one registered node of two GPUs that launches
    nothing (tests of what the API's use cases write, not of jobs running)."""
    from gpupool.clock import FakeClock
    from gpupool.sim.cluster import uniform
    from gpupool.store import nodes as node_repo
    from tests.support.executor import FakeExecutor

    executor = FakeExecutor(uniform(1, 2))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
    return HeadContext(db, FakeClock(now), executor, lambda: None)


@pytest.fixture
def now() -> datetime:
    """A fixed, timezone-aware UTC time; tests never read the clock."""
    return NOW


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(text_: str, lines: int = 15) -> str:
    return "\n".join(text_.strip().splitlines()[-lines:])


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[URL]:
    """URL of a database on a running PostgreSQL server, from which test databases are made."""
    given = os.environ.get("GPUPOOL_TEST_PG_URL")
    if given:
        yield make_url(given)
        return
    # A private directory and port per session: concurrent sessions never stop each other's server.
    data_dir = f"/tmp/gpupool-pg-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    returncode, stdout, stderr = _run_script(data_dir, str(_free_port()))
    if returncode != 0 or not stdout.strip():
        _stop(data_dir)
        why = "timed out" if returncode is None else f"exited {returncode}"
        pytest.skip(f"PostgreSQL not available ({SCRIPT.name} {why}):\n{_tail(stderr)}")
    try:
        yield make_url(stdout.strip().splitlines()[-1])
    finally:
        _stop(data_dir)


def _run_script(*args: str) -> tuple[int | None, str, str]:
    """Run the script in its own process group, so that a timeout also ends what it started (apt-get)."""
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=START_TIMEOUT_S)
        return proc.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return None, stdout, stderr


def _stop(data_dir: str) -> None:
    subprocess.run(["bash", str(SCRIPT), "stop", data_dir], capture_output=True, timeout=120, check=False)
    shutil.rmtree(data_dir, ignore_errors=True)
    Path(f"{data_dir}.initdb.log").unlink(missing_ok=True)


@pytest.fixture(scope="session")
def pg_admin(pg_admin_url: URL) -> Iterator[Engine]:
    engine = create_engine(pg_admin_url, isolation_level="AUTOCOMMIT", pool_size=1)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        engine.dispose()
        pytest.skip(f"PostgreSQL at {pg_admin_url.render_as_string(hide_password=True)} unreachable: {exc}")
    yield engine
    engine.dispose()


def _pg_database(pg_admin: Engine, pg_admin_url: URL, template: str | None = None) -> Iterator[str]:
    """A new database for one test (a copy of ``template``, or empty), dropped afterwards."""
    name = f"gpupool_t_{os.getpid()}_{next(_names)}"
    with pg_admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    yield pg_admin_url.set(database=name).render_as_string(hide_password=False)
    with pg_admin.connect() as conn:
        force = " WITH (FORCE)" if (conn.dialect.server_version_info or (0,)) >= (13,) else ""
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"{force}'))


@pytest.fixture
def pg_url(pg_admin: Engine, pg_admin_url: URL) -> Iterator[str]:
    """A new, empty database for one test, dropped afterwards."""
    yield from _pg_database(pg_admin, pg_admin_url)


@pytest.fixture(scope="session")
def pg_template(pg_admin: Engine, pg_admin_url: URL) -> Iterator[str]:
    """A PostgreSQL database the migrations brought to the newest revision, for CREATE DATABASE
    ... TEMPLATE (no connection to it is left open: a template must have none)."""
    name = f"gpupool_template_{os.getpid()}"
    with pg_admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    database = Database(pg_admin_url.set(database=name).render_as_string(hide_password=False))
    database.migrate()
    database.close()
    yield name
    with pg_admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database the migrations brought to the newest revision, closed (no -wal left)."""
    path = tmp_path_factory.mktemp("template") / "gpupool.sqlite"
    database = Database(f"sqlite:///{path}")
    database.migrate()
    database.close()
    assert not path.with_name(path.name + "-wal").exists()
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_kind(request: pytest.FixtureRequest) -> str:
    """Which engine a test taking ``db`` or ``db_url`` runs on: it runs on each."""
    return str(request.param)


@pytest.fixture
def db_url(engine_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a new, empty database."""
    if engine_kind == "sqlite":
        return f"sqlite:///{tmp_path / 'gpupool.sqlite'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def db(engine_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated, empty database: a copy of the session's migrated template (``migrate`` still
    runs, and finds nothing to do)."""
    if engine_kind == "sqlite":
        path = tmp_path / "gpupool.sqlite"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        os.chmod(path, 0o600)
        url = f"sqlite:///{path}"
    else:
        url = str(request.getfixturevalue("pg_migrated_url"))
    database = Database(url)
    database.migrate()
    yield database
    database.close()


@pytest.fixture
def pg_migrated_url(pg_admin: Engine, pg_admin_url: URL, pg_template: str) -> Iterator[str]:
    """A new database for one test, a copy of the migrated template, dropped afterwards."""
    yield from _pg_database(pg_admin, pg_admin_url, pg_template)


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first PostgreSQL test may have to install and start the server: give it the time."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("engine_kind") == "postgres":
            item.add_marker(pytest.mark.timeout(START_TIMEOUT_S + 120))
            return

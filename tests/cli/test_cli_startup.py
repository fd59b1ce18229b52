"""What keeps the CLI quick to start (issue 16): importing its entry point loads none of the heavy
libraries, a command loads only its own module, its options are read without pydantic and as
Typer reads them, and --version answers."""

from __future__ import annotations

import enum
import subprocess
import sys
from typing import Any

import pytest
from typer import _coercion
from typer.models import OptionInfo

import gpupool
from gpupool import knobs
from gpupool.cli import fastparams
from gpupool.cli.common import DEFAULT_URL
from gpupool.cli.main import COMMANDS, _load

# Loaded only by the commands (or the head) that need them.
HEAVY = (
    "httpx",
    "fastapi",
    "starlette",
    "sqlalchemy",
    "pydantic",
    "rich",
    "gpupool.scheduler",
    "gpupool.sim",
    "gpupool.head",
    "gpupool.api",
    "gpupool.store",
    "gpupool.cli.simulate",
    "gpupool.cli.jobs",
    "gpupool.cli.app",
    "typer",
    "click",
    "http.client",
    "ssl",
)


def _loaded_after(code: str, heavy: tuple[str, ...] = HEAVY) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {m for m in out.splitlines() if any(m == h or m.startswith(h + ".") for h in heavy)}


def test_importing_the_cli_loads_nothing_heavy() -> None:
    assert _loaded_after("import gpupool.cli.main") == set()


def test_a_command_loads_only_what_it_needs() -> None:
    """`gpupool jobs` against no head: the fast path parses it, reads the token, fails to connect and
    says so, with neither Typer nor Rich nor the standard library's HTTP client (issue 36)."""
    code = (
        "import os; os.environ['GPUPOOL_URL'] = 'http://127.0.0.1:9'\n"
        "from gpupool.cli.main import main\n"
        "try:\n    main(['jobs'])\nexcept SystemExit:\n    pass"
    )
    assert _loaded_after(code) == set()
    everything = _loaded_after(code, heavy=("gpupool.cli",))
    assert "gpupool.cli.job_actions" in everything  # the check can see a command's module
    assert "gpupool.cli.jobs" not in everything and "gpupool.cli.app" not in everything


def test_a_line_the_fast_path_declines_goes_to_typer() -> None:
    code = "from gpupool.cli.main import main\ntry:\n    main(['jobs', '--help'])\nexcept SystemExit:\n    pass"
    assert {"typer", "gpupool.cli.jobs"} <= _loaded_after(code, heavy=("typer", "gpupool.cli.jobs"))


def test_parsing_and_help_load_no_client_and_no_knobs() -> None:
    """What the Typer application imports to parse any command's arguments and print help: the
    client's errors and the token's paths, not the HTTP client, the job types or the settings'
    knobs (~85 ms of start)."""
    light = ("gpupool.client.http", "gpupool.client.transport", "gpupool.domain.jobs", "gpupool.knobs")
    out = subprocess.run(
        [sys.executable, "-c", "import gpupool.cli.app, sys; print('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert "gpupool.cli.common" in out  # the check can see what the entry point imports
    assert [m for m in light if m in out] == []


def test_the_default_url_is_the_default_port() -> None:
    assert f"http://127.0.0.1:{knobs.DEFAULT_PORT}" == DEFAULT_URL


def test_the_checker_sees_a_heavy_import() -> None:
    assert "httpx" in _loaded_after("import gpupool.cli.main, httpx")


def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "gpupool.cli.main", "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, f"gpupool {gpupool.__version__}\n")


class _Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


SAMPLES: dict[Any, list[Any]] = {
    str: ["", "x", "é ü", "--", " 1 "],
    int: [0, 7, "0", "7", "007", "-3", "123456789012345678", " 7", "7.0", "1_000", "x", True],
    float: [1.0, "1", "0.5", "-2.25", "1e3", ".5", "x", 3],
    bool: [True, False, "true", "0"],
    _Color: [_Color.RED, "red", "blue", "RED", "green"],
    list[str]: [("a", "b"), [], ("x",)],
    list[int]: [("1", "2"), ("1", "x"), ()],
}


@pytest.mark.parametrize("annotation", list(SAMPLES), ids=str)
def test_the_fast_reading_agrees_with_typers(annotation: Any) -> None:
    descriptor = _coercion.resolve_type_descriptor(annotation, OptionInfo())
    slow = _coercion.build_runtime_param(descriptor)
    for value in SAMPLES[annotation]:
        try:
            fast = fastparams.fast_value(annotation, value)
        except fastparams._Unhandled:
            continue  # Typer's own converter answers
        got = slow._coerce_value(value, param=None, ctx=None)
        assert (fast, type(fast)) == (got, type(got)), value


def test_the_everyday_commands_read_every_option_fast() -> None:
    """Only paths and numbers with bounds are left to Typer (pydantic): none in these commands."""
    for entry in COMMANDS:
        if entry.name in ("jobs", "submit", "show", "cancel", "nodes", "logs", "wait", "why"):
            command = _load(entry)
            slow = [p.name for p in command.params if not isinstance(p._runtime_param, fastparams._FastParam)]
            assert slow == [], entry.name


def test_submit_checks_the_job_without_defining_a_dataclass() -> None:
    """A script submitting in a loop pays each import on every job: checking and sending one loads
    neither ``dataclasses`` nor ``inspect`` (~10 ms), nor any heavy library (issue 36). The key with
    a line break is refused as the request is written, after everything is loaded, without the
    retries a refused connection would wait through."""
    code = (
        "import os; os.environ['GPUPOOL_URL'] = 'http://127.0.0.1:9'\n"
        "from gpupool.cli.main import main\n"
        "try:\n    main(['submit', '--gpus', '1', '--cpus', '2', '--memory', '8G', '--idempotency-key', 'a\\nb',"
        " '--', 'python', 't.py'])\n"
        "except SystemExit:\n    pass"
    )
    loaded = _loaded_after(
        code, heavy=(*HEAVY, "dataclasses", "inspect", "decimal", "uuid", "gpupool.cli", "gpupool.client")
    )
    assert {"gpupool.cli.submit_action", "gpupool.client.transport"} <= loaded  # the check sees the path
    assert {m for m in loaded if not m.startswith(("gpupool.cli.", "gpupool.client."))} == {
        "gpupool.cli",
        "gpupool.client",
    }

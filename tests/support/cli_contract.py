"""The CLI's contract, read off the running app: every command and subcommand with its help, its
options and arguments, and the exit code and first stderr line of a few invocations that fail
before doing anything (issue 36). tests/cli/fixtures/cli_contract.json holds it as the Typer CLI
gave it; tests/cli/test_cli_contract.py rebuilds it and compares, so a new parser (or a change to
a command) cannot silently change what users and scripts see.

Regenerate, only for a change meant to be seen (and review the diff)::

    .venv/bin/python -m tests.support.cli_contract --write

How it is taken, and why:
- Each invocation goes through ``gpupool.cli.main.main``, the console script's own function, in
  this process with stdout and stderr captured: one subprocess per invocation would cost ~0.25 s
  each (~60 s in all); the test checks a few against the real console script to show both agree.
- The environment is fixed while it runs: COLUMNS=100, TERM=dumb, NO_COLOR=1, no GPUPOOL_*,
  FORCE_COLOR or TERMINAL_WIDTH variable, HOME and the XDG dirs set to fixed fake paths, so Rich
  lays help out the same on every machine and terminal.
- Normalised, as they depend on the machine, not on the CLI: ANSI escapes are removed (a CI that
  forces colour); trailing spaces are cut from each help line (Rich pads lines to the width);
  this machine's home dir, working dir, temp dir, Python prefix and the user's data and config
  dirs are written ``<home>``, ``<cwd>``, ``<tmp>``, ``<prefix>``, ``<data-dir>`` and
  ``<config-dir>`` wherever they appear (defaults, help, messages); a default that is a function
  is ``"<computed>"``.
- Only invocations that stop at parsing are made (--help, an unknown option, a missing required
  argument or option, a group with no subcommand), so nothing reaches a head or starts anything.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import enum
import io
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer import _click

from gpupool.cli.main import app, main
from gpupool.settings import default_config_dir, default_data_dir

FIXTURE = Path(__file__).resolve().parents[1] / "cli" / "fixtures" / "cli_contract.json"
REGENERATE = ".venv/bin/python -m tests.support.cli_contract --write"

UNKNOWN_OPTION = "--no-such-option"
UNKNOWN_COMMAND = "no-such-command"

# Fixed while the contract is taken: see the module's docstring.
FIXED_ENV = {
    "COLUMNS": "100",
    "LINES": "50",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "HOME": "/nonexistent/home",
    "XDG_DATA_HOME": "/nonexistent/data",
    "XDG_CONFIG_HOME": "/nonexistent/config",
}
_DROPPED_ENV = ("FORCE_COLOR", "PY_COLORS", "CLICOLOR_FORCE", "TERMINAL_WIDTH", "GITHUB_ACTIONS", "JUPYTER_COLUMNS")
_TYPER_AT_IMPORT = ("MAX_WIDTH", "FORCE_TERMINAL")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@contextlib.contextmanager
def fixed_environment() -> Iterator[None]:
    """os.environ as FIXED_ENV says for the duration, then exactly as it was."""
    saved = dict(os.environ)
    # Typer reads TERMINAL_WIDTH and FORCE_COLOR once, at import: undo what they set, if loaded.
    rich_utils = sys.modules.get("typer.rich_utils")
    read_at_import = {name: getattr(rich_utils, name) for name in _TYPER_AT_IMPORT if hasattr(rich_utils, name)}
    try:
        for name in [n for n in os.environ if n.startswith("GPUPOOL_") or n in _DROPPED_ENV]:
            del os.environ[name]
        os.environ.update(FIXED_ENV)
        for name in read_at_import:
            setattr(rich_utils, name, None)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        for name, value in read_at_import.items():
            setattr(rich_utils, name, value)


def _machine_paths() -> list[tuple[str, str]]:
    """(this machine's path, its placeholder), longest first so a dir inside another wins."""
    places: dict[str, str] = {}
    for env in (dict(os.environ), FIXED_ENV):
        places[str(default_data_dir(env))] = "<data-dir>"
        places[str(default_config_dir(env))] = "<config-dir>"
    places.update({str(Path.home()): "<home>", FIXED_ENV["HOME"]: "<home>"})
    places.update({os.getcwd(): "<cwd>", tempfile.gettempdir(): "<tmp>", sys.prefix: "<prefix>"})
    return sorted(((p, name) for p, name in places.items() if len(p) > 1), key=lambda item: -len(item[0]))


def _normal(text: str, paths: list[tuple[str, str]]) -> str:
    text = _ANSI.sub("", text)
    for path, name in paths:
        text = text.replace(path, name)
    return text


def _value(value: Any, paths: list[tuple[str, str]]) -> Any:
    """A parameter's default as JSON."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, enum.Enum):
        return _value(value.value, paths)
    if isinstance(value, str | Path):
        return _normal(str(value), paths)
    if isinstance(value, list | tuple):
        return [_value(v, paths) for v in value]
    if callable(value):
        return "<computed>"
    return _normal(repr(value), paths)


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``gpupool ARGV``, run by the console script's own function."""
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exited:
            code = exited.code
    return (code if isinstance(code, int) else 1 if code else 0), out.getvalue(), err.getvalue()


def walk() -> list[tuple[list[str], Any]]:
    """(path, click command) of the root and every command and subcommand, depth first in the
    order --help lists them."""
    found: list[tuple[list[str], Any]] = []

    def visit(path: list[str], command: Any, ctx: Any) -> None:
        found.append((path, command))
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                visit([*path, name], sub, _click.Context(sub, info_name=name, parent=ctx))

    root = typer.main.get_command(app)
    visit([], root, _click.Context(root, info_name="gpupool"))
    return found


def _parameter(parameter: Any, ctx: Any, paths: list[tuple[str, str]]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "name": parameter.name,
        "required": bool(parameter.required),
        "nargs": parameter.nargs,
        "multiple": bool(parameter.multiple),
        "type": parameter.display_type(ctx) if hasattr(parameter, "display_type") else None,
        "metavar": parameter.metavar,
        "default": _value(parameter.default, paths),
        "envvar": parameter.envvar,
        "hidden": bool(getattr(parameter, "hidden", False)),
    }
    if getattr(parameter, "min", None) is not None or getattr(parameter, "max", None) is not None:
        record["bounds"] = [parameter.min, parameter.max]
    if parameter.param_type_name == "option":
        record["names"] = [*parameter.opts]
        record["secondary_names"] = [*parameter.secondary_opts]
        record["flag"] = bool(parameter.is_flag)
        record["count"] = bool(parameter.count)
        record["takes_value"] = not (parameter.is_flag or parameter.count)
    return record


def _run(argv: list[str], paths: list[tuple[str, str]]) -> dict[str, Any]:
    code, out, err = invoke(argv)
    lines = _normal(err, paths).strip().splitlines()
    return {"argv": argv, "exit_code": code, "stderr_first_line": lines[0] if lines else "", "wrote_stdout": bool(out)}


def _invocations(path: list[str], command: Any, paths: list[tuple[str, str]]) -> list[dict[str, Any]]:
    runs = [_run([*path, UNKNOWN_OPTION], paths)]
    if hasattr(command, "list_commands"):
        runs.append(_run([*path, UNKNOWN_COMMAND], paths))
        if not command.invoke_without_command:  # else it would run: nothing here may
            runs.append(_run(path, paths))
        if not path:
            runs.append(_run(["--version"], paths))
    elif any(p.required for p in command.params):
        runs.append(_run(path, paths))  # stops at the first required argument or option missing
    return runs


def command_record(path: list[str], command: Any, ctx: Any, paths: list[tuple[str, str]]) -> dict[str, Any]:
    code, out, err = invoke([*path, "--help"])
    params = list(command.params)
    record: dict[str, Any] = {
        "path": path,
        "group": hasattr(command, "list_commands"),
        "help": [line.rstrip() for line in _normal(out, paths).splitlines()],
        "help_run": {"exit_code": code, "stderr_first_line": _normal(err, paths).strip().split("\n")[0]},
        "options": [_parameter(p, ctx, paths) for p in params if p.param_type_name == "option"],
        "arguments": [_parameter(p, ctx, paths) for p in params if p.param_type_name == "argument"],
        "invocations": _invocations(path, command, paths),
    }
    if record["group"]:
        record["subcommands"] = list(command.list_commands(ctx))
    return record


def key(path: list[str]) -> str:
    """The fixture's key for a command: its words after ``gpupool``, or ``gpupool`` for the root."""
    return " ".join(["gpupool", *path])


def build() -> dict[str, dict[str, Any]]:
    """The contract of the CLI as it is now, keyed by ``key``."""
    with fixed_environment():
        paths = _machine_paths()
        contract = {}
        for path, command in walk():
            ctx = _click.Context(command, info_name=path[-1] if path else "gpupool")
            contract[key(path)] = command_record(path, command, ctx, paths)
    return contract


def differences(name: str, expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """What differs between two records of command ``name``, one line (or a help diff) each, naming
    the field: ``gpupool jobs: option --limit: default: 1000 -> 500``."""
    found: list[str] = []
    for field in sorted(set(expected) | set(actual)):
        old, new = expected.get(field), actual.get(field)
        if old == new:
            continue
        if field == "help" and isinstance(old, list) and isinstance(new, list):
            diff = difflib.unified_diff(old, new, "fixture", "now", lineterm="", n=1)
            found.append(f"{name}: help:\n" + "\n".join(diff))
        elif field in _KEYED and isinstance(old, list) and isinstance(new, list):
            found += _keyed(f"{name}: {_KEYED[field][0]}", old, new, _KEYED[field][1])
        else:
            found.append(f"{name}: {field}: {old!r} -> {new!r}")
    return found


def _option_key(record: dict[str, Any]) -> str:
    return str((record.get("names") or [record.get("name")])[0])


_KEYED: dict[str, tuple[str, Any]] = {
    "options": ("option", _option_key),
    "arguments": ("argument", lambda record: str(record.get("name"))),
    "invocations": ("gpupool", lambda record: " ".join(record.get("argv", []))),
}


def _keyed(prefix: str, old: list[dict[str, Any]], new: list[dict[str, Any]], key_of: Any) -> list[str]:
    """Records matched by their key, so a changed option is named rather than its position."""
    before, after = {key_of(r): r for r in old}, {key_of(r): r for r in new}
    found = [f"{prefix} {k}: missing now" for k in before if k not in after]
    found += [f"{prefix} {k}: not in the fixture" for k in after if k not in before]
    for k in [k for k in before if k in after]:
        for field in sorted(set(before[k]) | set(after[k])):
            if before[k].get(field) != after[k].get(field):
                found.append(f"{prefix} {k}: {field}: {before[k].get(field)!r} -> {after[k].get(field)!r}")
    if not found and list(before) != list(after):
        found.append(f"{prefix}s in another order: {list(before)} -> {list(after)}")
    return found


def dumps(contract: dict[str, dict[str, Any]]) -> str:
    return json.dumps(contract, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def load() -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


def _main() -> int:
    parser = argparse.ArgumentParser(description="Print, or --write, the CLI's contract (tests/cli/fixtures).")
    parser.add_argument("--write", action="store_true", help=f"write it to {FIXTURE.name}")
    write = parser.parse_args().write
    text = dumps(build())
    if write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(text, encoding="utf-8")
        print(f"wrote {FIXTURE}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main())

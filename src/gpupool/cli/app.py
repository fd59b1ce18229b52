"""The Typer application: every command, its help and its errors. ``cli/main.py`` runs a command
line here unless the fast path (``cli/fastpath.py``) answered it."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

import gpupool
from gpupool.cli import fastparams
from gpupool.cli.commands import BY_NAME, Entry
from gpupool.cli.common import err_console
from gpupool.cli.outcome import run_to_exit
from gpupool.client.errors import CA_ENV, INSECURE_ENV

_TYPER_SETTINGS: dict[str, Any] = {"add_completion": False, "pretty_exceptions_enable": False}


def _load(entry: Entry) -> Any:
    """The click command for ``entry``, built as registering it on the root app would build it."""
    module = importlib.import_module(f"gpupool.cli.{entry.module}")
    holder = typer.Typer(**_TYPER_SETTINGS)
    holder.callback()(_nothing)  # with a callback, Typer builds a group even for one command
    if entry.group:
        holder.add_typer(getattr(module, entry.attr), name=entry.name)
    else:
        holder.command(entry.name, context_settings=entry.context_settings)(getattr(module, entry.attr))
    return fastparams.install(typer.main.get_command(holder).commands[entry.name])  # type: ignore[attr-defined]


def _nothing() -> None:
    pass


class _LazyCommands(MutableMapping[str, Any]):
    """The root group's commands: every name known at once, each command built when first asked
    for. Typer reads the keys for "did you mean" and looks commands up one by one to run them."""

    def __init__(self) -> None:
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            self._loaded[name] = _load(BY_NAME[name])
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("the CLI's commands are fixed")

    def __iter__(self) -> Iterator[str]:
        return iter(BY_NAME)

    def __len__(self) -> int:
        return len(BY_NAME)


class _LazyGroup(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands()

    def list_commands(self, ctx: Any) -> list[str]:
        return list(BY_NAME)


def _print_version(value: bool) -> None:
    if value:
        print(f"gpupool {gpupool.__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="gpupool",
    cls=_LazyGroup,
    no_args_is_help=True,
    help="gpupool: one shared pool of GPUs. Start a head with 'gpupool up', then submit jobs.",
    **_TYPER_SETTINGS,
)


@app.callback()
def _connection(
    ca: Annotated[
        str | None,
        typer.Option("--ca", envvar=CA_ENV, help="CA bundle to verify the head's certificate [default: the system's]"),
    ] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="allow plain http to a head on another machine (tokens in clear text)")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="print gpupool's version and exit"),
    ] = False,
) -> None:
    """How every command reaches the head: given before the command, e.g. gpupool --ca ca.pem jobs."""
    if ca:
        os.environ[CA_ENV] = ca
    if insecure:
        os.environ[INSECURE_ENV] = "1"


# Typer may vendor click or use the installed one; take its exception classes from Typer itself.
_CLICK = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
UsageError: type[Exception] = _CLICK["UsageError"]
ClickException: type[Exception] = _CLICK["ClickException"]


def run(argv: list[str] | None = None) -> int:
    """Parse ``argv`` with Typer and run the command it names; exits with its code."""
    command = fastparams.install(typer.main.get_command(app), subcommands=False)
    return run_to_exit(lambda: _parse_and_run(command, argv))


def _parse_and_run(command: Any, argv: list[str] | None) -> object:
    """What the command returned; for click's own errors, said in one line, the exit code."""
    try:
        return command.main(args=argv, prog_name="gpupool", standalone_mode=False)
    except UsageError as exc:
        err_console.print(f"error: {_message(exc)} (see gpupool {_sub(exc)}--help)")
        return 2
    except ClickException as exc:
        err_console.print(f"error: {_message(exc)}")
        return 2
    except typer.Abort:
        return 130


def _message(exc: Any) -> str:
    """Click's message on one line; for an unknown option, the close ones as a question."""
    close = getattr(exc, "possibilities", None)
    if getattr(exc, "option_name", None) and close:
        return f"{' '.join(str(exc.message).split())} (did you mean {_either(list(close))}?)"
    return " ".join(str(exc.format_message()).split())


def _either(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``: click lists the closest first."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _sub(exc: Any) -> str:
    """The command's words after ``gpupool`` (``project set``, not ``set``), then a space."""
    ctx = getattr(exc, "ctx", None)
    words = str(ctx.command_path).split()[1:] if ctx is not None else []
    return "".join(f"{word} " for word in words)

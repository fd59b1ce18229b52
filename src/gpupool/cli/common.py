"""Options and helpers every client command shares: where the head is, which token, output."""

from __future__ import annotations

import enum
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from gpupool.cli import credentials
from gpupool.domain.errors import InvalidInput
from gpupool.paths import TOKEN_FILE, default_data_dir

if TYPE_CHECKING:
    from rich.console import Console

    from gpupool.client import GpupoolClient


class LazyConsole:
    """Rich's Console, made on first use: importing Rich costs ~35-70 ms. What the everyday
    commands print (lines, ``Styled`` text, ``Listing`` tables, ``Grid``s) is written as Rich
    would write it by ``cli/textout.py`` without importing Rich at all; the rest goes to Rich."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def real(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True, markup=False)
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        from gpupool.cli import textout

        stream = sys.stderr if self._stderr else sys.stdout
        if set(kwargs) <= {"sep", "end"} and (at := textout.screen(stream)) is not None:
            text = textout.render(objects, at, **kwargs)
            if text is not None:
                try:
                    stream.write(text)
                    stream.flush()
                except BrokenPipeError:  # `gpupool jobs | head -1`: end as Rich's console ends
                    _broken_pipe()
                return
        from gpupool.cli.styled import rich_cell

        self.real().print(*(rich_cell(o) for o in objects), **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


def _broken_pipe() -> None:
    """What Rich's ``Console.on_broken_pipe`` does: the rest of stdout goes nowhere, exit code 1."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(1)


console = LazyConsole()
err_console = LazyConsole(stderr=True)

DEFAULT_URL = "http://127.0.0.1:7070"  # knobs.DEFAULT_PORT (test_cli_startup.py checks), without importing the knobs


class Output(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


class FoundToken(NamedTuple):
    value: str | None
    source: str  # where it came from, for people: "GPUPOOL_TOKEN", a file's path, or "none"


def find_token(url: str | None = None, *, environ: Mapping[str, str] | None = None) -> FoundToken:
    """The token for the head at ``url`` (default: GPUPOOL_URL, else the default URL), first found of:
    GPUPOOL_TOKEN; the entry for that head in the credentials file ``gpupool login`` writes; the
    admin-token file of GPUPOOL_DATA_DIR (or the default data dir)."""
    env = os.environ if environ is None else environ
    if env.get("GPUPOOL_TOKEN"):
        return FoundToken(env["GPUPOOL_TOKEN"].strip(), "GPUPOOL_TOKEN")
    head = url if url is not None else env.get("GPUPOOL_URL") or DEFAULT_URL
    saved = credentials.stored_token(head, env)
    if saved is not None:
        return FoundToken(saved, str(credentials.credentials_path(env)))
    path = default_data_dir(env) / TOKEN_FILE
    try:
        admin = Path(path).read_text().strip() or None
    except OSError:
        admin = None
    return FoundToken(admin, str(path)) if admin is not None else FoundToken(None, "none")


def resolve_token(url: str | None = None, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The token for the head at ``url``: see ``find_token``."""
    return find_token(url, environ=environ).value


def client(url: str) -> GpupoolClient:
    from gpupool.client import GpupoolClient

    return GpupoolClient(url, resolve_token(url))


def env_pairs(items: list[str] | None) -> dict[str, str]:
    """``--env K=V`` options (repeatable) as a mapping, each checked to be K=V."""
    pairs: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--env {item!r} is not K=V")
        pairs[key] = value
    return pairs


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))

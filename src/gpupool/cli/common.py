"""Options and helpers every client command shares: where the head is, which token, output."""

from __future__ import annotations

import enum
import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from gpupool.client import GpupoolClient
from gpupool.settings import DEFAULT_PORT, TOKEN_FILE, default_data_dir

console = Console(highlight=False, soft_wrap=True, markup=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


class Output(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


UrlOpt = Annotated[str, typer.Option("--url", envvar="GPUPOOL_URL", help="the head's URL", show_default=True)]
OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="table for people, json for scripts")]


def resolve_token(environ: dict[str, str] | None = None) -> str | None:
    """GPUPOOL_TOKEN, else the admin-token file of GPUPOOL_DATA_DIR (or the default data dir)."""
    env = dict(os.environ) if environ is None else environ
    if env.get("GPUPOOL_TOKEN"):
        return env["GPUPOOL_TOKEN"].strip()
    path = default_data_dir(env) / TOKEN_FILE
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def client(url: str) -> GpupoolClient:
    return GpupoolClient(url, resolve_token())


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))

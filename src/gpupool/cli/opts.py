"""The options many commands share, as Typer declarations. Apart from ``common`` so that what a
command does (which the fast path runs without Typer) never imports Typer."""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.cli.common import Output

UrlOpt = Annotated[str, typer.Option("--url", envvar="GPUPOOL_URL", help="the head's URL", show_default=True)]
OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="table for people, json for scripts")]

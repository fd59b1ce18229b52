"""``gpupool up``: start the head on the embedded default.

Its options are the knobs of ``gpupool.knobs``, one each, built from the table: the flag, the
default --help shows, the bounds, the help and the environment variable (``GPUPOOL_NAME``) are
the knob's. Here is only what the command does with them."""

from __future__ import annotations

import gc
import inspect
import logging
from typing import Annotated, Any

import typer

from gpupool.knobs import KNOBS, Knob
from gpupool.settings import Settings


def up(**given: Any) -> None:
    """Start the head: API, controller and executor (local virtual nodes, or a Ray cluster) in one process."""
    settings = Settings.from_options(given)  # every option read and checked before anything starts
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The server stack loads only for `up`, keeping other commands quick, and only once the options
    # above are read: a malformed one is refused in half a second, not after two of imports.
    from gpupool.head import Head

    head = Head(settings)
    # What is loaded by now (the server stack, the app, the store) lives as long as the head: frozen,
    # the collector no longer scans it, and a full collection under a burst of submissions pauses
    # the head for ~10 ms instead of 120-210 ms (docs/performance/log.md, 2026-11-27).
    gc.collect()
    gc.freeze()
    head.serve()


def option(knob: Knob[Any]) -> inspect.Parameter:
    """The knob as a Typer option: a keyword parameter annotated with its ``typer.Option``."""
    bounds = {"min": knob.low, "max": knob.high} if knob.bounded_by_option else {}
    # The variable is said in the help, not by Typer (show_envvar), which would also put it in every
    # error message of the option and change them; "\\[" keeps Rich from reading it as markup.
    said = f"{knob.help_text} \\[env var: {knob.envvar}]"
    info = typer.Option(*knob.flags, help=said, envvar=knob.envvar, show_envvar=False, **bounds)  # type: ignore[arg-type]
    return inspect.Parameter(
        knob.name, inspect.Parameter.KEYWORD_ONLY, default=knob.given, annotation=Annotated[knob.option, info]
    )


# Typer reads a command's options from its signature: this one's is the table's.
up.__signature__ = inspect.Signature([option(knob) for knob in KNOBS])  # type: ignore[attr-defined]

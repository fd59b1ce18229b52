"""The ``gpupool`` entry point. A command line the fast path understands (an everyday command with
plain options: ``cli/fastpath.py``) runs without Typer; anything else (``--help``, an error, every
other command) goes to the Typer application (``cli/app.py``), which says it as it always has."""

from __future__ import annotations

import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    from gpupool.cli import fastpath

    args = sys.argv[1:] if argv is None else list(argv)
    code = fastpath.run(args)
    if code is not None:
        return code
    from gpupool.cli.app import run

    return run(args)


def __getattr__(name: str) -> Any:
    """``app`` and the command table, from where they live, for the tests and the docs' reference."""
    if name in ("app", "_load"):
        from gpupool.cli import app

        return getattr(app, name)
    if name in ("COMMANDS", "BY_NAME", "_BY_NAME"):
        from gpupool.cli import commands

        return getattr(commands, name.lstrip("_"))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()

"""How a command ends, the same whichever way it was parsed (Typer or the fast path): its exit
code, and every error as one line on stderr, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

from gpupool.client.errors import ClientError, HeadUnreachable
from gpupool.domain.errors import GpupoolError


class Exit(Exception):
    """Raised by a command to end with ``code`` after what it printed (``wait``: 1 for a failed job)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


def failed(exc: BaseException) -> int | None:
    """The exit code for what a command raised, after saying it on stderr in one line; None for
    what is not one of gpupool's own outcomes (the caller's parser may know it)."""
    if isinstance(exc, Exit):
        return exc.code
    from gpupool.cli.common import err_console  # only to say an error: --version needs none of it

    if isinstance(exc, ClientError):
        err_console.print(f"error: {' '.join(exc.message.split())}")
        return 2 if exc.status < 500 else 1
    if isinstance(exc, HeadUnreachable):
        err_console.print(f"error: {exc}")
        return 1
    if isinstance(exc, GpupoolError):
        err_console.print(f"error: {' '.join(exc.message.split())}")
        return 2
    return None


def run_to_exit(command: Callable[[], object]) -> int:
    """Run ``command`` and exit with its code (an int it returns, else 0): what it raised said in
    one line (``failed``), Ctrl-C ended as click ends it (a new line on stderr, 130). Both ways of
    parsing a command line end here."""
    try:
        result = command()
    except (KeyboardInterrupt, EOFError):
        print(file=sys.stderr)
        return finish(130)
    except Exception as exc:
        code = failed(exc)
        if code is None:
            raise
        return finish(code)
    return finish(result if isinstance(result, int) else 0)


def finish(code: int) -> int:
    """Exit with ``code`` once stdout is flushed (a pipe closed early must not hide the code)."""
    sys.stdout.flush()
    sys.exit(code)

"""Entry point: one Typer app; every error becomes one line on stderr and exit code 2."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from gpupool.cli import (
    alerts,
    audit,
    dashboard,
    down,
    jobs,
    join,
    login,
    nodes,
    projects,
    report,
    simulate,
    top,
    up,
    users,
)
from gpupool.cli.common import err_console
from gpupool.client import ClientError, HeadUnreachable
from gpupool.client.http import CA_ENV, INSECURE_ENV
from gpupool.domain.errors import GpupoolError

app = typer.Typer(
    name="gpupool",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="gpupool: one shared pool of GPUs. Start a head with 'gpupool up', then submit jobs.",
)
_PASSTHROUGH = {"allow_interspersed_args": False, "ignore_unknown_options": True}


@app.callback()
def _connection(
    ca: Annotated[
        str | None,
        typer.Option("--ca", envvar=CA_ENV, help="CA bundle to verify the head's certificate [default: the system's]"),
    ] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="allow plain http to a head on another machine (tokens in clear text)")
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

app.command()(up.up)
app.command()(down.down)
app.command(context_settings=_PASSTHROUGH)(jobs.submit)
app.command("jobs")(jobs.jobs)
app.command()(jobs.show)
app.command()(jobs.logs)
app.command()(jobs.cancel)
app.command()(jobs.wait)
app.command()(jobs.why)
app.command("nodes")(nodes.nodes)
app.command()(nodes.drain)
app.command()(nodes.undrain)
app.command("top")(top.top)
app.command("dashboard")(dashboard.dashboard)
app.command("report")(report.report)
app.command("alerts")(alerts.alerts)
app.command("audit")(audit.audit)
app.command("idle")(alerts.idle)
app.command("projects")(projects.projects)
app.add_typer(projects.project_app, name="project")
app.add_typer(users.user_app, name="user")
app.add_typer(users.token_app, name="token")
app.command()(login.login)
app.command()(login.logout)
app.command()(login.whoami)
app.command()(join.join)
app.command("simulate")(simulate.simulate)
app.command("plan")(simulate.plan)


def main(argv: list[str] | None = None) -> int:
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="gpupool", standalone_mode=False)
    except UsageError as exc:
        err_console.print(f"error: {_message(exc)} (see gpupool {_sub(exc)}--help)")
        return _exit(2)
    except ClickException as exc:
        err_console.print(f"error: {_message(exc)}")
        return _exit(2)
    except typer.Abort:
        return _exit(130)
    except ClientError as exc:
        err_console.print(f"error: {' '.join(exc.message.split())}")
        return _exit(2 if exc.status < 500 else 1)
    except HeadUnreachable as exc:
        err_console.print(f"error: {exc}")
        return _exit(1)
    except GpupoolError as exc:
        err_console.print(f"error: {' '.join(exc.message.split())}")
        return _exit(2)
    return _exit(result if isinstance(result, int) else 0)


def _message(exc: Any) -> str:
    return " ".join(str(exc.format_message()).split())


def _sub(exc: Any) -> str:
    ctx = getattr(exc, "ctx", None)
    if ctx is None or ctx.command.name in (None, "gpupool"):
        return ""
    return f"{ctx.command.name} "


def _exit(code: int) -> int:
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()

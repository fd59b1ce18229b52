"""Every command of the CLI, where it is declared and what it does, without importing any of them.

Both ways a command line is run read this table: the Typer application (``cli/app.py``, for help,
errors and every command) and the fast path (``cli/fastpath.py``, for the everyday commands).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# submit's own options end at ``--`` or at the first word that is not an option: what follows is
# the job's command, its options included. An unknown option before that is refused like anywhere
# else (it once became the command, so a typo such as --gpu 2 ran as a job).
COMMAND_AFTER = {"allow_interspersed_args": False}


class Entry(NamedTuple):
    name: str
    module: str  # under gpupool.cli
    attr: str  # a command function, or with group=True a Typer app of subcommands
    group: bool = False
    context_settings: dict[str, Any] | None = None
    # "module:function" under gpupool.cli that does the command with the declaration's parameters,
    # importing neither Typer nor Rich: the fast path calls it (cli/fastpath.py)
    action: str | None = None


# Every command, in the order --help lists them. A command's module is imported only when that
# command runs (or --help lists them all): a whole-CLI import costs ~0.4 s, one command's ~0.1 s.
COMMANDS = (
    Entry("up", "up", "up"),
    Entry("down", "down", "down"),
    Entry("submit", "jobs", "submit", context_settings=COMMAND_AFTER, action="submit_action:submit"),
    Entry("jobs", "jobs", "jobs", action="job_actions:jobs"),
    Entry("show", "jobs", "show", action="job_actions:show"),
    Entry("logs", "jobs", "logs", action="job_actions:logs"),
    Entry("cancel", "jobs", "cancel", action="job_actions:cancel"),
    Entry("wait", "jobs", "wait", action="job_actions:wait"),
    Entry("why", "jobs", "why", action="job_actions:why"),
    Entry("nodes", "nodes", "nodes", action="node_actions:nodes"),
    Entry("drain", "nodes", "drain"),
    Entry("undrain", "nodes", "undrain"),
    Entry("images", "images", "images"),
    Entry("top", "top", "top"),
    Entry("dashboard", "dashboard", "dashboard"),
    Entry("report", "report", "report"),
    Entry("alerts", "alerts", "alerts"),
    Entry("audit", "audit", "audit"),
    Entry("idle", "alerts", "idle"),
    Entry("projects", "projects", "projects"),
    Entry("serve", "services", "serve"),
    Entry("services", "services", "services"),
    Entry("login", "login", "login"),
    Entry("logout", "login", "logout"),
    Entry("whoami", "login", "whoami"),
    Entry("join", "join", "join"),
    Entry("simulate", "simulate", "simulate"),
    Entry("plan", "simulate", "plan"),
    # Typer lists groups of subcommands after the commands.
    Entry("project", "projects", "project_app", group=True),
    Entry("node", "nodes", "node_app", group=True),
    Entry("image", "images", "image_app", group=True),
    Entry("service", "services", "service_app", group=True),
    Entry("user", "users", "user_app", group=True),
    Entry("token", "users", "token_app", group=True),
)
BY_NAME = {entry.name: entry for entry in COMMANDS}

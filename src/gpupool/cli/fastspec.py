"""The fast path's table of options, made from the commands' own declarations.

Every command is declared once, as a Typer function (its options, help, defaults); Typer builds
its help, its errors and the docs' reference from that. ``build()`` walks the click commands Typer
makes from those declarations and writes down, for each command that has an action
(``commands.Entry.action``), what parsing needs: each option's spellings, whether it takes a value,
its type and bounds, its environment variable. ``fastspec.json`` holds the result, so that running
a command needs neither Typer nor the declarations' modules; ``tests/cli/test_fastpath.py`` fails
when it is not what ``build()`` gives now (regenerate: ``python -m gpupool.cli.fastspec --write``).
"""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Any, get_args, get_origin

SPEC_FILE = Path(__file__).with_name("fastspec.json")
TYPES = {str: "str", int: "int", float: "float", bool: "bool"}


class Unsupported(Exception):
    """A declaration the fast path cannot parse as Typer would (a callback, a prompt, a path check)."""


def build() -> dict[str, Any]:
    import typer

    from gpupool.cli.app import _load, app
    from gpupool.cli.commands import COMMANDS

    root = typer.main.get_command(app)
    version = [p for p in root.params if p.name == "version"]
    spec: dict[str, Any] = {
        "root": [_param(p) for p in root.params if p.name != "version"],
        "version": version[0].opts,
        "commands": {},
    }
    for entry in COMMANDS:
        if entry.action is None:
            continue
        command = _load(entry)
        settings = entry.context_settings or {}
        try:
            params = [_param(p) for p in command.params]
        except Unsupported as exc:
            raise Unsupported(f"gpupool {entry.name}: {exc}") from None
        spec["commands"][entry.name] = {
            "action": entry.action,
            "interspersed": settings.get("allow_interspersed_args", command.allow_interspersed_args),
            "params": params,
        }
    return spec


def _param(p: Any) -> dict[str, Any]:
    descriptor = p.type_descriptor
    info = descriptor.parameter_info
    if p.callback is not None or p.is_eager or getattr(p, "prompt", None) or getattr(p, "count", False):
        raise Unsupported(f"{p.name} has a callback, a prompt or a count")
    if info.parser is not None or info.clamp or descriptor.file_annotation is not None or not p.expose_value:
        raise Unsupported(f"{p.name} has a parser of its own, a clamp or a file")
    annotation = descriptor.annotation
    many = get_origin(annotation) is list
    leaf = get_args(annotation)[0] if many else annotation
    out: dict[str, Any] = {
        "name": p.name,
        "kind": p.param_type_name,
        "opts": list(p.opts),
        "secondary": list(p.secondary_opts),
        "flag": bool(getattr(p, "is_flag", False)),
        "multiple": bool(p.multiple),
        "nargs": p.nargs,
        "required": bool(p.required),
        "envvar": p.envvar,
        "list": many,
        "min": info.min,
        "max": info.max,
    }
    if isinstance(leaf, type) and issubclass(leaf, enum.Enum):
        if not info.case_sensitive:
            raise Unsupported(f"{p.name} is a choice read regardless of case")
        out |= {"type": "enum", "enum": f"{leaf.__module__}:{leaf.__qualname__}", "choices": [m.value for m in leaf]}
    elif leaf in TYPES:
        out["type"] = TYPES[leaf]
    else:
        raise Unsupported(f"{p.name} is of type {leaf!r}")
    if isinstance(p.envvar, list | tuple) or (p.envvar and out["type"] != "str"):
        raise Unsupported(f"{p.name} reads a list of variables or a typed one")
    if out["flag"] and out["type"] != "bool":
        raise Unsupported(f"{p.name} is a flag with a value")
    return out


def render(spec: dict[str, Any]) -> str:
    """The spec as JSON with one parameter a line, so a change reads as a one-line diff."""

    def params(items: list[dict[str, Any]], indent: str) -> str:
        return "[\n" + ",\n".join(f"{indent}  {json.dumps(i, ensure_ascii=False)}" for i in items) + f"\n{indent}]"

    commands = ",\n".join(
        f'  {json.dumps(name)}: {{"action": {json.dumps(c["action"])}, "interspersed": {json.dumps(c["interspersed"])},'
        f' "params": {params(c["params"], "  ")}}}'
        for name, c in spec["commands"].items()
    )
    return (
        f'{{\n "root": {params(spec["root"], " ")},\n "version": {json.dumps(spec["version"])},\n'
        f' "commands": {{\n{commands}\n }}\n}}\n'
    )


if __name__ == "__main__":
    text = render(build())
    if sys.argv[1:] == ["--write"]:
        SPEC_FILE.write_text(text)
        print(f"wrote {SPEC_FILE}")
    else:
        sys.stdout.write(text)

"""Reading a command's plain options without pydantic. Typer 0.2x converts every parameter with a
pydantic TypeAdapter built on first use: importing pydantic and building the adapters costs a
command ~0.13 s, more than the rest of its parsing. ``install`` gives each parameter of the common
kinds (str, int, float, an Enum, lists of those) a converter that handles the everyday values
itself (a string of digits, a choice spelt exactly, a default already of its type) and hands
anything else to Typer's own converter, so results, and the message for a bad value, stay Typer's.

Typer's parameter internals are private: with a Typer that lacks them, ``install`` does nothing
and Typer converts as before.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, get_args, get_origin

try:
    from typer import _click, _coercion, _param_types
except ImportError:  # an older Typer: click's own types, no pydantic
    _coercion = None  # type: ignore[assignment]

_INT = re.compile(r"-?[0-9]{1,18}")
_FLOAT = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")


class _Unhandled(Exception):
    """A value this module leaves to Typer."""


def fast_value(annotation: Any, value: Any, *, case_sensitive: bool = True, ctx: Any = None) -> Any:
    """``value`` converted to ``annotation`` as Typer would, or ``_Unhandled``."""
    if get_origin(annotation) is list and isinstance(value, list | tuple):
        (item,) = get_args(annotation)
        return [fast_value(item, v, case_sensitive=case_sensitive, ctx=ctx) for v in value]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _choice(annotation, value, case_sensitive, ctx)
    if annotation in (bool, str) and isinstance(value, annotation):
        return annotation(value)
    if annotation is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if annotation is float and isinstance(value, float):
        return value
    pattern = {int: _INT, float: _FLOAT}.get(annotation)
    if pattern is not None and isinstance(value, str) and pattern.fullmatch(value):
        return annotation(value)
    raise _Unhandled


def _choice(annotation: type[enum.Enum], value: Any, case_sensitive: bool, ctx: Any) -> Any:
    if isinstance(value, annotation):
        return value
    if isinstance(value, str):
        try:
            return _param_types.coerce_cli_choice(
                value, choices=list(annotation), case_sensitive=case_sensitive, ctx=ctx
            )
        except ValueError:
            pass  # Typer's converter says why
    raise _Unhandled


if _coercion is not None:

    @dataclass(frozen=True)
    class _FastParam(_coercion.RuntimeParam):
        descriptor: _coercion.TypeDescriptor

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return fast_value(self.annotation, value, case_sensitive=self.parameter_info.case_sensitive, ctx=ctx)
            except _Unhandled:
                slow = _coercion.build_runtime_param(self.descriptor)
                return slow._coerce_value(value, param=param, ctx=ctx)


def _plain(parameter: Any) -> bool:
    info = parameter.type_descriptor.parameter_info
    if info.parser is not None or info.min is not None or info.max is not None or info.clamp:
        return False
    if parameter.type_descriptor.file_annotation is not None:
        return False
    annotation = parameter.type_descriptor.annotation
    leaf = get_args(annotation)[0] if get_origin(annotation) is list else annotation
    return leaf in (bool, str, int, float) or (isinstance(leaf, type) and issubclass(leaf, enum.Enum))


def install(command: Any, *, subcommands: bool = True) -> Any:
    """Give ``command``'s plain parameters, and its subcommands', the fast converter; returns it."""
    if _coercion is None:
        return command
    # --help is made on first use, and Typer would convert its (unset) value with pydantic: make
    # it now (click keeps it) to give it the fast converter too.
    help_option = command.get_help_option(_click.Context(command)) if hasattr(command, "get_help_option") else None
    for parameter in [*getattr(command, "params", ()), *([help_option] if help_option is not None else [])]:
        if getattr(parameter, "_runtime_param", "absent") is None and _plain(parameter):
            descriptor = parameter.type_descriptor
            parameter._runtime_param = _FastParam(
                parameter_info=descriptor.parameter_info, annotation=descriptor.annotation, descriptor=descriptor
            )
    for sub in getattr(command, "commands", {}).values() if subcommands else ():
        install(sub)
    return command

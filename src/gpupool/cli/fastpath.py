"""Running an everyday command without Typer: a command line parsed as click would parse it, from
the table ``fastspec.json`` that ``cli/fastspec.py`` makes from the commands' own declarations.

Typer and its click take ~40 ms of a command's start, and Rich's help formatter more; a person
typing ``gpupool jobs`` or a script looping over ``gpupool submit`` pays that on every call. This
parser handles the command lines that parse without a word to say: known options, values of the
declared types within their bounds, the right number of arguments. For anything else (``--help``,
an unknown or misspelt option, a missing value, a bad number, a command without an action) it
declines, having done nothing, and the Typer application parses the same line and says what it
always said. So the output and exit codes of a line are the same either way;
``tests/cli/test_fastpath.py`` runs command lines through both and compares what the command gets.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from importlib import import_module
from typing import Any, NamedTuple

import gpupool

SPEC_FILE = os.path.join(os.path.dirname(__file__), "fastspec.json")
_INT = re.compile(r"-?[0-9]{1,18}")
_FLOAT = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")
_VERSION = "version"

Param = dict[str, Any]


class Declined(Exception):
    """A command line the Typer application should parse (and explain)."""


class Call(NamedTuple):
    """A parsed command line: the action and its keyword arguments, and the root's options."""

    command: str
    action: str
    kwargs: dict[str, Any]
    root: dict[str, Any]


def run(args: list[str]) -> int | None:
    """Run ``args`` (the words after ``gpupool``) and exit with the command's code; None, having
    done nothing, when the Typer application should take the line."""
    try:
        try:
            spec = load()
        except (OSError, ValueError):  # a package without its table: Typer parses everything
            raise Declined from None
        root, version, rest = parse_root(args, spec)
        if version:
            from gpupool.cli.outcome import finish

            print(f"gpupool {gpupool.__version__}")
            return finish(0)
        call = parse_command(rest, spec, root)
        action = resolve(call.action)
    except Declined:
        return None
    return execute(call, action)


def load() -> dict[str, Any]:
    with open(SPEC_FILE, encoding="utf-8") as f:
        spec: dict[str, Any] = json.load(f)
    return spec


def parse_root(args: list[str], spec: dict[str, Any]) -> tuple[dict[str, Any], bool, list[str]]:
    """The root's options (before the command's name), whether --version was among them, and the
    words from the command's name on."""
    params = [*spec["root"], _flag(_VERSION, spec["version"])]
    given: dict[str, list[Any]] = {}
    i = 0
    while i < len(args) and _is_option(args[i]):
        if args[i] == "--":
            raise Declined
        i = _option(args, i, _by_opt(params), given)
    values = _values(params, given, {})
    return values, bool(values.pop(_VERSION, False)), args[i:]


def parse_command(words: list[str], spec: dict[str, Any], root: dict[str, Any]) -> Call:
    if not words or words[0] not in spec["commands"]:
        raise Declined
    command = spec["commands"][words[0]]
    params: list[Param] = command["params"]
    by_opt = _by_opt(params)
    given: dict[str, list[Any]] = {}
    loose: list[str] = []
    rest = words[1:]
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "--":
            loose += rest[i + 1 :]
            break
        if _is_option(word):
            i = _option(rest, i, by_opt, given)
        elif command["interspersed"]:
            loose.append(word)
            i += 1
        else:
            loose += rest[i:]
            break
    arguments = _unpack(loose, [p for p in params if p["kind"] == "argument"])
    return Call(words[0], command["action"], _values(params, given, arguments), root)


def _is_option(word: str) -> bool:
    return word[:1] == "-" and len(word) > 1


def _flag(name: str, opts: list[str]) -> Param:
    return {
        "name": name,
        "kind": "option",
        "opts": opts,
        "secondary": [],
        "flag": True,
        "multiple": False,
        "nargs": 1,
        "required": False,
        "envvar": None,
        "list": False,
        "min": None,
        "max": None,
        "type": "bool",
    }


def _by_opt(params: list[Param]) -> dict[str, Param]:
    return {opt: p for p in params if p["kind"] == "option" for opt in (*p["opts"], *p["secondary"])}


def _option(words: list[str], i: int, by_opt: dict[str, Param], given: dict[str, list[Any]]) -> int:
    """Read the option at ``words[i]`` (with its value) into ``given``; the index after it."""
    word = words[i]
    if word.startswith("--"):
        name, eq, attached = word.partition("=")
        param = by_opt.get(name)
        if param is None:
            raise Declined
        if param["flag"]:
            if eq:
                raise Declined  # click: "does not take a value"
            given.setdefault(param["name"], []).append(name not in param["secondary"])
            return i + 1
        if eq:
            given.setdefault(param["name"], []).append(attached)
            return i + 1
        return _next_value(words, i, param, given)
    if "=" in word:
        raise Declined  # click reads -o=json as the value "=json": leave such lines to it
    for j in range(1, len(word)):  # -ab: flags together; -ojson: a value attached
        param = by_opt.get("-" + word[j])
        if param is None:
            raise Declined
        if param["flag"]:
            given.setdefault(param["name"], []).append("-" + word[j] not in param["secondary"])
            continue
        if j + 1 < len(word):
            given.setdefault(param["name"], []).append(word[j + 1 :])
            return i + 1
        return _next_value(words, i, param, given)
    return i + 1


def _next_value(words: list[str], i: int, param: Param, given: dict[str, list[Any]]) -> int:
    if i + 1 >= len(words):
        raise Declined  # click: "requires an argument"
    given.setdefault(param["name"], []).append(words[i + 1])  # taken as it is, dashes and all
    return i + 2


def _unpack(words: list[str], arguments: list[Param]) -> dict[str, list[str]]:
    """The words each argument takes, as click deals them: the ones of one word in order from
    either end, and what is left to the one of any number."""
    taken: dict[str, list[str]] = {}
    front = 0
    back = len(words)
    rest = list(arguments)
    while rest and rest[0]["nargs"] == 1:
        a = rest.pop(0)
        if front < back:
            taken[a["name"]] = [words[front]]
            front += 1
    while rest and rest[-1]["nargs"] == 1:
        a = rest.pop()
        if front < back:
            back -= 1
            taken[a["name"]] = [words[back]]
    if len(rest) > 1 or (rest and rest[0]["nargs"] != -1):
        raise Declined
    if rest:
        taken[rest[0]["name"]] = words[front:back]
    elif front < back:
        raise Declined  # click: "unexpected extra argument"
    return taken


def _values(params: list[Param], given: dict[str, list[Any]], arguments: dict[str, list[str]]) -> dict[str, Any]:
    """Each parameter's value, converted, for those given (on the line or in their environment
    variable); the others are left to the action's defaults, which are the declaration's."""
    out: dict[str, Any] = {}
    for p in params:
        words = arguments.get(p["name"]) if p["kind"] == "argument" else given.get(p["name"])
        if not words and p["envvar"] and os.environ.get(p["envvar"]):
            words = [os.environ[p["envvar"]]]
        if not words:
            if p["required"]:
                raise Declined  # click: "missing"
            continue
        if p["flag"]:
            out[p["name"]] = bool(words[-1])
        elif p["list"]:
            out[p["name"]] = [_convert(p, w) for w in words]
        else:
            out[p["name"]] = _convert(p, words[-1])
    return out


def _convert(p: Param, word: str) -> Any:
    kind = p["type"]
    if kind == "str":
        return word
    if kind == "enum":
        if word not in p["choices"]:
            raise Declined
        module, _, name = p["enum"].partition(":")
        return getattr(import_module(module), name)(word)
    pattern = _INT if kind == "int" else _FLOAT if kind == "float" else None
    if pattern is None or not pattern.fullmatch(word):
        raise Declined
    value = int(word) if kind == "int" else float(word)
    if (p["min"] is not None and value < p["min"]) or (p["max"] is not None and value > p["max"]):
        raise Declined
    return value


def resolve(action: str) -> Callable[..., Any]:
    module, _, name = action.partition(":")
    function: Callable[..., Any] = getattr(import_module(f"gpupool.cli.{module}"), name)
    return function


def execute(call: Call, action: Callable[..., Any]) -> int:
    """Do what the root's options do (as the Typer app's callback does), then the command; exit
    with its code, every error said as the Typer path says it."""
    from gpupool.cli.outcome import run_to_exit
    from gpupool.client.errors import CA_ENV, INSECURE_ENV

    if call.root.get("ca"):
        os.environ[CA_ENV] = call.root["ca"]
    if call.root.get("insecure"):
        os.environ[INSECURE_ENV] = "1"
    return run_to_exit(lambda: action(**call.kwargs))

"""The fast path (cli/fastpath.py) reads a command line as Typer does, or leaves it to Typer (issue 36).

Every line is parsed both ways: by the fast parser, and by the Typer application with the command's
action replaced by a recorder. Where the fast parser takes a line, Typer must take it too and hand
the action the same values; where Typer refuses one (an unknown option, a missing value, a bad
number), the fast parser must have declined it. Lines come from a fixed list of everyday ones (which
the fast path must take) and from Hypothesis, built of each command's own option spellings, values
good and bad, and the separators click treats specially.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.cli import fastpath, fastspec
from gpupool.cli.app import app
from gpupool.cli.commands import COMMANDS
from gpupool.client.errors import CA_ENV, INSECURE_ENV

SPEC = fastpath.load()
ACTIONS = {entry.name: entry for entry in COMMANDS if entry.action}
EVERYDAY = [
    ["jobs"],
    ["jobs", "--all", "-u", "ann", "--limit", "5", "-o", "json"],
    ["jobs", "-a", "--mine", "--expand", "-ojson", "--url=http://127.0.0.1:9"],
    ["--insecure", "--ca", "ca.pem", "jobs"],
    ["submit", "--gpus", "2", "--", "python", "train.py", "--lr", "3"],
    ["submit", "--gpus=0.5", "--env", "A=1", "--env", "B=2", "--workers", "2:8", "python", "t.py", "-v"],
    ["submit", "--image", "nvcr.io/nvidia/pytorch:24.10-py3", "--max-restarts", "3", "--expose", "8888"],
    ["show", "12"],
    ["show", "12_3", "-o", "json"],
    ["cancel", "1", "2", "3_4"],
    ["nodes"],
    ["nodes", "--output", "json"],
    ["why", "7"],
    ["logs", "7", "-f", "--worker", "1"],
    ["wait", "7", "--timeout", "10m"],
]


def test_the_spec_is_what_the_declarations_give() -> None:
    if fastpath.load() != fastspec.build():
        pytest.fail(
            "src/gpupool/cli/fastspec.json is not what the commands' declarations give: regenerate it with "
            "`.venv/bin/python -m gpupool.cli.fastspec --write`",
            pytrace=False,
        )
    assert set(SPEC["commands"]) == set(ACTIONS) and {"jobs", "submit", "show", "cancel", "nodes", "why"} <= set(
        ACTIONS
    )


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_an_action_takes_its_declarations_parameters(name: str) -> None:
    """The fast path calls the action with only the options given: the rest are its defaults,
    which must be the declaration's."""
    entry = ACTIONS[name]
    declared = inspect.signature(getattr(importlib.import_module(f"gpupool.cli.{entry.module}"), entry.attr))
    assert entry.action is not None
    action = fastpath.resolve(entry.action)
    plain = inspect.signature(action)
    assert [(p.name, p.default, p.kind) for p in declared.parameters.values()] == [
        (p.name, p.default, p.kind) for p in plain.parameters.values()
    ]


@contextlib.contextmanager
def _recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Each action replaced by one that records what Typer hands it."""
    seen: dict[str, Any] = {}
    for name, entry in ACTIONS.items():
        module, _, attr = (entry.action or "").partition(":")

        def record(*args: Any, _name: str = name, **kwargs: Any) -> None:
            assert not args
            seen["call"] = (_name, kwargs)

        monkeypatch.setattr(importlib.import_module(f"gpupool.cli.{module}"), attr, record)
    yield seen


def _typer(argv: list[str]) -> tuple[str, Any, dict[str, str | None]] | None:
    """What the Typer app does with ``argv``: the command and values its action got, and the root's
    effect on the environment; None for a line it refuses or answers itself (help, version)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in (CA_ENV, INSECURE_ENV):
            mp.setenv(name, "")  # recorded, so what the root's callback sets is undone
            mp.delenv(name)
        with _recording(mp) as seen:
            command = typer.main.get_command(app)
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    command.main(args=list(argv), prog_name="gpupool", standalone_mode=False)
            except Exception as exc:
                if type(exc).__name__ in ("UsageError", "NoSuchOption", "BadOptionUsage", "BadParameter",
                                          "MissingParameter", "BadArgumentUsage", "ClickException"):  # fmt: skip
                    return None
                raise
            if "call" not in seen:
                return None
            env = {name: os.environ.get(name) for name in (CA_ENV, INSECURE_ENV)}
            return seen["call"][0], seen["call"][1], env


def _fast(argv: list[str]) -> tuple[str, Any, dict[str, str | None]] | None:
    try:
        root, version, rest = fastpath.parse_root(list(argv), SPEC)
        if version:
            return None
        call = fastpath.parse_command(rest, SPEC, root)
        action = fastpath.resolve(call.action)
    except fastpath.Declined:
        return None
    filled = {
        p.name: call.kwargs.get(p.name, p.default)
        for p in inspect.signature(action).parameters.values()  # what the action sees
    }
    env = {
        CA_ENV: call.root.get("ca") or os.environ.get(CA_ENV),
        INSECURE_ENV: "1" if call.root.get("insecure") else None,
    }
    return call.command, filled, env


def _agree(argv: list[str]) -> bool:
    fast = _fast(argv)
    if fast is None:
        return False
    slow = _typer(argv)
    assert slow is not None, f"the fast path took {argv}, which Typer refuses"
    assert fast[0] == slow[0], argv
    assert fast[1] == slow[1], argv
    assert {k: type(v) for k, v in fast[1].items()} == {k: type(v) for k, v in slow[1].items()}, argv
    assert fast[2] == slow[2], argv
    return True


@pytest.mark.parametrize("argv", EVERYDAY, ids=" ".join)
def test_everyday_lines_take_the_fast_path_and_agree(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUPOOL_URL", CA_ENV, INSECURE_ENV):
        monkeypatch.delenv(name, raising=False)
    assert _agree(argv), f"the fast path declined {argv}"


def test_the_url_comes_from_the_environment_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPOOL_URL", "http://127.0.0.1:7777")
    assert _agree(["jobs"])
    assert _fast(["jobs"])[1]["url"] == "http://127.0.0.1:7777"  # type: ignore[index]
    monkeypatch.setenv("GPUPOOL_URL", "")  # empty: as if unset (click)
    assert _agree(["jobs"]) and _fast(["jobs"])[1]["url"] == "http://127.0.0.1:7070"  # type: ignore[index]


DECLINED = [
    [],
    ["--help"],
    ["jobs", "--help"],
    ["jobs", "--bogus"],
    ["jobs", "--limit"],
    ["jobs", "--limit", "x"],
    ["jobs", "--limit", "1e3"],
    ["jobs", "--all=yes"],
    ["jobs", "-o", "yaml"],
    ["jobs", "-o=json"],
    ["jobs", "extra"],
    ["show"],
    ["show", "1", "2"],
    ["cancel"],
    ["project", "list"],
    ["up"],
    ["--", "jobs"],
    ["--bogus", "jobs"],
]


@pytest.mark.parametrize("argv", DECLINED, ids=lambda a: " ".join(a) or "(nothing)")
def test_what_needs_typer_is_left_to_it(argv: list[str]) -> None:
    assert _fast(argv) is None


def _words(name: str) -> st.SearchStrategy[list[str]]:
    params = SPEC["commands"][name]["params"]
    spellings = [o for p in params if p["kind"] == "option" for o in (*p["opts"], *p["secondary"])]
    values = [
        "0",
        "1",
        "-3",
        "007",
        "2.5",
        ".5",
        "1e3",
        "abc",
        "json",
        "table",
        "",
        "-",
        "--",
        "x y",
        "12_3",
        "99999999999999999999",
    ]
    odd = ["--help", "--bogus", "-z", "-ao", "-aojson", "-oa", "--all=1", "--url=", "--limit=5", "-ujson"]
    word = st.sampled_from(spellings + values + odd) | st.builds(
        lambda o, v: f"{o}={v}", st.sampled_from(spellings), st.sampled_from(values)
    )
    return st.lists(word, max_size=7)


_GOOD = {"int": ["0", "7", "-3", "007"], "float": ["0", "0.5", "2", "-1.25"], "str": ["a", "x y", "-", "--", "é"]}


def _wellformed(name: str) -> st.SearchStrategy[list[str]]:
    """Lines that should parse: options of the command with values of their type, in any order,
    then its arguments."""
    params = SPEC["commands"][name]["params"]

    def option(p: dict[str, Any]) -> st.SearchStrategy[list[str]]:
        spelling = st.sampled_from([*p["opts"], *p["secondary"]])
        if p["flag"]:
            return spelling.map(lambda o: [o])
        value = st.sampled_from(p.get("choices") or _GOOD[p["type"]])
        return st.one_of(
            st.tuples(spelling, value).map(list), st.tuples(spelling, value).map(lambda ov: [f"{ov[0]}={ov[1]}"])
        )

    options = [option(p) for p in params if p["kind"] == "option"]
    arguments = [p for p in params if p["kind"] == "argument"]
    count = sum(1 if a["nargs"] == 1 else 2 for a in arguments)
    return st.tuples(
        st.lists(st.one_of(options), max_size=5) if options else st.just([]),
        st.lists(st.sampled_from(["1", "2_3", "x", "-"]), min_size=count, max_size=count),
    ).map(lambda oa: [w for o in oa[0] for w in o] + oa[1])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_line_the_fast_path_takes_typer_reads_the_same(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(SPEC["commands"])))
    root = data.draw(
        st.lists(st.sampled_from(["--insecure", "--ca=c.pem"]), max_size=2)
        | st.lists(st.sampled_from(["--insecure", "--ca", "c.pem", "--version", "--bogus"]), max_size=3)
    )
    argv = [*root, name, *data.draw(st.one_of(_words(name), _wellformed(name)))]
    with pytest.MonkeyPatch.context() as mp:
        for variable in ("GPUPOOL_URL", CA_ENV, INSECURE_ENV):
            mp.delenv(variable, raising=False)
        if _fast(argv) is None:
            return
        _agree(argv)


def test_the_spec_file_is_json_a_line_a_parameter() -> None:
    text = fastspec.SPEC_FILE.read_text()
    assert json.loads(text) == SPEC and text == fastspec.render(SPEC)


def test_without_its_table_the_fast_path_leaves_every_line_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastpath, "SPEC_FILE", "/nonexistent/fastspec.json")
    assert fastpath.run(["jobs"]) is None

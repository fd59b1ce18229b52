"""Every command keeps its help, options, arguments and exit codes (issue 36): the CLI as it is now,
read by tests/support/cli_contract.py, against tests/cli/fixtures/cli_contract.json, taken once
from the Typer CLI. A new parser must reproduce it; a change meant to be seen regenerates it
(the command is in the failure) and shows up in review as a diff of the fixture."""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support import cli_contract

FIXTURE = cli_contract.load()


@functools.cache
def _now() -> dict[str, dict[str, Any]]:
    return cli_contract.build()


def test_the_fixture_has_every_command_and_no_other() -> None:
    now, kept = set(_now()), set(FIXTURE)
    if now != kept:
        pytest.fail(
            f"commands without a fixture entry: {sorted(now - kept)}; in the fixture but gone: {sorted(kept - now)}. "
            f"If that is meant, regenerate it with `{cli_contract.REGENERATE}` and review the diff.",
            pytrace=False,
        )
    assert len(now) > 50 and {"gpupool", "gpupool submit", "gpupool project set", "gpupool token create"} <= now


@pytest.mark.parametrize("name", sorted(FIXTURE))
def test_the_command_keeps_its_contract(name: str) -> None:
    if name not in _now():
        pytest.fail(f"{name}: no longer a command (see test_the_fixture_has_every_command_and_no_other)")
    found = cli_contract.differences(name, FIXTURE[name], _now()[name])
    if found:
        pytest.fail(
            "\n".join([*found, f"If that is meant, regenerate with `{cli_contract.REGENERATE}`."]), pytrace=False
        )


def test_a_change_is_named_by_command_and_field() -> None:
    old = FIXTURE["gpupool project set"]
    new = copy.deepcopy(old)
    new["options"][0]["default"] = "changed"
    new["invocations"][0]["exit_code"] = 1
    new["help"][3] += " more"
    found = cli_contract.differences("gpupool project set", old, new)
    option = new["options"][0]["names"][0]
    assert f"gpupool project set: option {option}: default: {old['options'][0]['default']!r} -> 'changed'" in found
    assert any(
        line.startswith("gpupool project set: gpupool project set --no-such-option: exit_code: 2 -> 1")
        for line in found
    )
    assert any(line.startswith("gpupool project set: help:\n") and "+" + new["help"][3] in line for line in found)
    assert cli_contract.differences("gpupool project set", old, copy.deepcopy(old)) == []


# The contract is taken in this process for speed; these show the console script prints the same.
SAMPLES = [["--help"], ["jobs", "--help"], ["project", "set"], ["submit", "--no-such-option"], ["token"]]


@pytest.mark.parametrize("argv", SAMPLES, ids=" ".join)
def test_in_process_is_what_the_console_script_prints(argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_") and k not in cli_contract._DROPPED_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "gpupool.cli.main", *argv],
        env={**env, **cli_contract.FIXED_ENV},
        capture_output=True,
        text=True,
        timeout=60,
    )
    with cli_contract.fixed_environment():
        assert cli_contract.invoke(argv) == (done.returncode, done.stdout, done.stderr)

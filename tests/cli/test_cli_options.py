"""Every command refuses an option it does not know (issue 19): a typo must never become part of a
job's command or be silently dropped. Walks the real command table, so a command added later is
walked too."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.cli.main import COMMANDS, _load, main


def _commands() -> list[tuple[list[str], Any]]:
    """(the words that name it, the click command) of every command and subcommand."""
    found: list[tuple[list[str], Any]] = []
    for entry in COMMANDS:
        command = _load(entry)
        subs = getattr(command, "commands", None)
        if entry.group and subs:
            found += [([entry.name, name], sub) for name, sub in subs.items()]
        else:
            found.append(([entry.name], command))
    return found


def _misspelt() -> list[tuple[list[str], str, str]]:
    """(command words, an option, the option with its last letter doubled) for every long option."""
    cases = []
    for words, command in _commands():
        names = {name for p in command.params for name in (*p.opts, *p.secondary_opts)}
        for name in sorted(n for n in names if n.startswith("--") and n != "--help"):
            typo = name + name[-1]
            assert typo not in names
            cases.append((words, name, typo))
    return cases


CASES = _misspelt()


def test_the_walk_sees_every_command() -> None:
    walked = {tuple(words) for words, _, _ in CASES}
    assert ("submit",) in walked and ("project", "set") in walked and ("token", "create") in walked
    assert len(CASES) > 100


@pytest.mark.parametrize(("words", "option", "typo"), CASES, ids=[f"{' '.join(w)} {t}" for w, _, t in CASES])
def test_a_misspelt_option_is_refused_with_exit_code_2(
    words: list[str], option: str, typo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A value after the typo, as someone would type it: it must not be taken for the command.
    with pytest.raises(SystemExit) as exited:
        main([*words, typo, "1", "--", "true"])
    out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert f"No such option: {typo}" in err and option in err.split("did you mean", 1)[1], err
    assert f"see gpupool {' '.join(words)} --help" in err


def test_submit_refuses_a_typo_before_the_command_and_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["submit", "--gpu", "2", "--", "true"])
    assert exited.value.code == 2
    assert "No such option: --gpu (did you mean --gpus" in capsys.readouterr().err


def test_an_unknown_short_option_is_refused_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["jobs", "-x"])
    assert exited.value.code == 2
    assert "No such option: -x (see gpupool jobs --help)" in capsys.readouterr().err

"""The head's settings are declared once, in ``gpupool.knobs`` (issue 31, part 2): ``gpupool up``'s
options, ``Settings``' defaults and the environment variables are derived from the table, and these
tests fail when a knob is declared twice, when a default differs between the table, ``Settings`` and
``gpupool up --help``, or when an option has no knob. Bounds and the environment are checked
through ``gpupool up`` itself, with a stand-in head that records its settings and serves nothing."""

from __future__ import annotations

import dataclasses
import enum
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from gpupool import knobs
from gpupool.cli.main import _BY_NAME, _load
from gpupool.cli.main import main as gpupool
from gpupool.knobs import KNOBS, Knob, table
from gpupool.scheduler.config import MAX_RECLAIM_MIN_RUN_S
from gpupool.settings import Settings

NOT_KNOBS = {"base_env"}  # what the head's own environment gives, not a setting


def disagreements(table_: tuple[Knob[Any], ...], settings: type[Any]) -> list[str]:
    """Where the table and a settings dataclass disagree: a field without a knob, a knob without a
    field, or a default that differs (a field without a default, the data dir, is the environment's)."""
    fields = {f.name: f for f in dataclasses.fields(settings) if f.name not in NOT_KNOBS}
    by_field = {k.setting: k for k in table_}
    found = [f"field {name} has no knob" for name in fields.keys() - by_field.keys()]
    found += [f"knob {by_field[name].name} has no field" for name in by_field.keys() - fields.keys()]
    for name in fields.keys() & by_field.keys():
        default = fields[name].default
        if default is not dataclasses.MISSING and default != by_field[name].default:
            found.append(f"{name}: Settings says {default!r}, the knob {by_field[name].default!r}")
    return found


def up_command() -> Any:
    return _load(_BY_NAME["up"])


def test_a_knob_declared_twice_is_refused() -> None:
    assert table(*KNOBS) == KNOBS
    with pytest.raises(ValueError, match="'port' declared twice"):
        table(*KNOBS, knobs.PORT)
    bind = dataclasses.replace(knobs.HOST, name="bind", field="host")  # a second knob for the same field
    with pytest.raises(ValueError, match="knob 'bind': setting 'host' declared twice"):
        table(*KNOBS, bind)
    assert table(*KNOBS, dataclasses.replace(bind, field="bind_address"))[-1].flag == "--bind"


def test_the_table_and_settings_agree() -> None:
    assert disagreements(KNOBS, Settings) == []
    assert Settings(Path("/x")).max_user_log_bytes == 10 * 2**30  # a default read from the knob's text


def test_a_default_that_differs_is_caught() -> None:
    moved = tuple(dataclasses.replace(k, given=7071) if k is knobs.PORT else k for k in KNOBS)
    assert disagreements(moved, Settings) == ["port: Settings says 7070, the knob 7071"]
    assert disagreements(KNOBS[1:], Settings) == ["field port has no knob"]


def test_every_up_option_is_a_knob_and_every_knob_an_option() -> None:
    params = [p for p in up_command().params if p.name != "help"]
    assert [p.name for p in params] == [k.name for k in KNOBS]
    for param, knob in zip(params, KNOBS, strict=True):
        assert knob.flag in param.opts, (knob.name, param.opts)
        assert param.envvar == knob.envvar == "GPUPOOL_" + knob.name.upper()
        assert param.default == knob.given, knob.name  # the default the command line gets, as the table has it
        if knob.bounded_by_option:
            assert (param.min, param.max) == (knob.low, knob.high), knob.name


def test_help_shows_each_knobs_default_and_variable(capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    with pytest.raises(SystemExit):
        gpupool(["up", "--help"])
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", capsys.readouterr().out).split())
    for knob in KNOBS:
        assert f"[env var: {knob.envvar}]" in said, knob.name
        if knob.given is not None and knob.option is not bool:
            shown = knob.given.value if isinstance(knob.given, enum.Enum) else knob.given
            assert f"{knob.help_text} [env var: {knob.envvar}] [default: {shown}]" in said, knob.name


def test_the_reclaim_bound_is_the_schedulers() -> None:
    assert knobs.RECLAIM_MIN_RUN.high == MAX_RECLAIM_MIN_RUN_S


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Settings]:
    """``gpupool up`` with a stand-in head: the settings it would run with, and nothing served."""
    for knob in KNOBS:
        monkeypatch.delenv(knob.envvar, raising=False)
    monkeypatch.setenv("GPUPOOL_DATA_DIR", str(tmp_path))
    runs: list[Settings] = []

    class Head:
        def __init__(self, settings: Settings) -> None:
            runs.append(settings)

        def serve(self) -> None:
            pass

    monkeypatch.setitem(sys.modules, "gpupool.head", types.SimpleNamespace(Head=Head))
    return runs


def up(*args: str) -> int:
    with pytest.raises(SystemExit) as exited:
        gpupool(["up", *args])
    return int(exited.value.code or 0)


def _past(knob: Knob[Any], bound: float, step: int) -> str:
    """A value just past ``bound``, as typed: 301s, 1099511627777 (bytes), 65536."""
    value = int(bound) + step if knob.option is not float else bound + step
    return f"{value}s" if knob.read.__name__ == "_duration" else str(value)


OUT_OF_BOUNDS = [
    (knob, value)
    for knob in KNOBS
    for bound, step in ((knob.high, 1), (knob.low, -1))
    if bound is not None and bound + step >= 0
    for value in [_past(knob, bound, step)]
]


@pytest.mark.parametrize(("knob", "value"), OUT_OF_BOUNDS, ids=[f"{k.flag}={v}" for k, v in OUT_OF_BOUNDS])
def test_a_value_out_of_bounds_is_refused_in_one_line(
    started: list[Settings], capsys: pytest.CaptureFixture[str], knob: Knob[Any], value: str
) -> None:
    assert up(f"{knob.flag}={value}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and knob.flag in err[0], err
    assert started == []


def test_in_bounds_values_start_the_head(started: list[Settings]) -> None:
    assert up("--client-timeout", "5m", "--max-body", "64M", "--port", "0", "--no-gateway") == 0
    (settings,) = started
    assert (settings.client_timeout_s, settings.max_body_bytes, settings.port) == (300.0, 64 * 2**20, 0)
    assert settings.gateway is False and settings.base_env is not None


def test_the_environment_is_read(
    started: list[Settings], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUPOOL_MAX_USER_LOGS", "5G")
    monkeypatch.setenv("GPUPOOL_GATEWAY", "false")
    monkeypatch.setenv("GPUPOOL_TRUSTED_PROXY", "10.0.0.0/8 ::1")
    monkeypatch.setenv("GPUPOOL_IDLE_AFTER", "1h")
    assert up("--idle-after", "2h") == 0  # the command line wins over the environment
    (settings,) = started
    assert settings.max_user_log_bytes == 5 * 2**30 and settings.gateway is False
    assert settings.trusted_proxies == ("10.0.0.0/8", "::1/128") and settings.idle_after_s == 7200.0
    assert settings.data_dir == tmp_path.resolve()  # GPUPOOL_DATA_DIR, the --data-dir knob's variable

    monkeypatch.setenv("GPUPOOL_MAX_USER_LOGS", "2T")  # refused as the flag would be
    assert up() == 2
    assert "--max-user-logs must be between" in capsys.readouterr().err

"""The CLI's credentials file and where a command's token comes from (no head needed)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gpupool.cli import credentials, login
from gpupool.cli.common import find_token, resolve_token
from gpupool.domain.errors import InvalidInput
from gpupool.settings import default_config_dir

URL = "http://head-a:7070"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "admin-token").write_text("gp_admin\n")
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"), "GPUPOOL_DATA_DIR": str(data)}


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ("http://head-a:7070", "http://head-a:7070"),
        ("http://head-a:7070/", "http://head-a:7070"),
        (" HTTP://Head-A:7070/api/v1/ ", "http://head-a:7070"),
        ("https://head-a:443", "https://head-a"),
        ("http://head-a:80/", "http://head-a"),
        ("https://head-a:80", "https://head-a:80"),
        ("http://[::1]:7070", "http://[::1]:7070"),
        ("http://alice:secret@head-a:7070", "http://head-a:7070"),
    ],
)
def test_urls_are_keyed_by_scheme_host_and_port(given: str, key: str) -> None:
    assert credentials.normalise_url(given) == key


@pytest.mark.parametrize("given", ["head-a:7070", "ftp://head-a", "http://", "http://head-a:99999", ""])
def test_what_is_not_a_head_url_is_refused(given: str) -> None:
    with pytest.raises(InvalidInput, match="not a head URL"):
        credentials.normalise_url(given)


def test_the_config_dir_follows_xdg() -> None:
    assert default_config_dir({"XDG_CONFIG_HOME": "/x/conf", "HOME": "/h"}) == Path("/x/conf/gpupool")
    assert default_config_dir({"HOME": "/h"}) == Path("/h/.config/gpupool")
    assert default_config_dir({"XDG_CONFIG_HOME": "relative", "HOME": "/h"}) == Path("/h/.config/gpupool")


def test_saved_0600_in_a_0700_dir_whatever_the_umask(env: dict[str, str], tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = credentials.save(URL + "/", "gp_alice", {"user": "alice", "role": "member"}, env)
    finally:
        os.umask(old)
    assert path == tmp_path / "config" / "gpupool" / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    entry = json.loads(path.read_text())["heads"][URL]
    assert (entry["token"], entry["user"], entry["role"]) == ("gp_alice", "alice", "member")
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_one_token_per_head(env: dict[str, str]) -> None:
    credentials.save(URL, "gp_a", {"user": "alice", "role": "member"}, env)
    credentials.save("https://head-b", "gp_b", {"user": "bob", "role": "admin"}, env)
    credentials.save(URL, "gp_a2", {"user": "alice", "role": "member"}, env)
    assert credentials.stored_token("http://HEAD-A:7070/", env) == "gp_a2"
    assert credentials.stored_token("https://head-b:443", env) == "gp_b"
    assert credentials.stored_token("http://head-b", env) is None
    assert credentials.remove(URL, env) is True
    assert credentials.remove(URL, env) is False
    assert credentials.stored_token(URL, env) is None
    assert credentials.stored_token("https://head-b", env) == "gp_b"
    assert credentials.remove("https://head-b", env) is True
    assert not credentials.credentials_path(env).exists()  # the last entry takes the file with it


def test_token_resolution_order(env: dict[str, str]) -> None:
    assert find_token(URL, environ=env) == (
        "gp_admin",
        str(Path(env["GPUPOOL_DATA_DIR"]) / "admin-token"),
    )
    credentials.save(URL, "gp_alice", {"user": "alice", "role": "member"}, env)
    assert find_token(URL, environ=env) == ("gp_alice", str(credentials.credentials_path(env)))
    assert resolve_token("http://head-other:7070", environ=env) == "gp_admin"
    assert resolve_token(URL, environ={**env, "GPUPOOL_TOKEN": " gp_env\n"}) == "gp_env"
    # Without a URL: GPUPOOL_URL's head, else the default one.
    assert resolve_token(environ={**env, "GPUPOOL_URL": URL + "/"}) == "gp_alice"
    assert resolve_token(environ=env) == "gp_admin"
    no_admin = {**env, "GPUPOOL_DATA_DIR": env["HOME"]}
    assert find_token("http://head-other:7070", environ=no_admin) == (None, "none")


def test_a_file_others_may_read_is_ignored_with_a_warning(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = credentials.save(URL, "gp_alice", {"user": "alice", "role": "member"}, env)
    path.chmod(0o644)
    assert resolve_token(URL, environ=env) == "gp_admin"
    err = capsys.readouterr().err
    assert err.startswith(f"warning: ignoring {path}: its mode 0644 lets others read it") and err.count("\n") == 1
    # Logging in again writes it 0600, keeping the other entries.
    credentials.save("https://head-b", "gp_b", {"user": "bob", "role": "admin"}, env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert resolve_token(URL, environ=env) == "gp_alice"


def test_a_malformed_file_is_ignored_and_not_overwritten(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = credentials.credentials_path(env)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    path.chmod(0o600)
    assert resolve_token(URL, environ=env) == "gp_admin"
    assert "not a gpupool credentials file" in capsys.readouterr().err
    with pytest.raises(InvalidInput, match="cannot update"):
        credentials.save(URL, "gp_alice", {"user": "alice", "role": "member"}, env)
    assert path.read_text() == "{not json"


def test_login_prompts_hidden_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    prompts: list[str] = []

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Tty())

    def getpass(prompt: str) -> str:
        prompts.append(prompt)
        return " gp_typed \n"

    monkeypatch.setattr("getpass.getpass", getpass)
    assert login._read_token(URL) == "gp_typed"
    assert prompts == [f"token for {URL} (input hidden): "]

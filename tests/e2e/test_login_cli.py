"""`gpupool login`, `logout` and `whoami` against a real head: the token is checked before it is kept,
kept 0600 per head URL, used when GPUPOOL_TOKEN is not set, and forgotten by logout.

Every CLI run here has HOME and XDG_CONFIG_HOME in tmp_path and GPUPOOL_DATA_DIR pointing at an
empty dir, so neither the user's real files nor the head's admin-token file can supply a token."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess

pytestmark = pytest.mark.e2e


def _env(head: HeadProcess, tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "no-data").mkdir(exist_ok=True)
    env = {
        **head.env(),
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "GPUPOOL_DATA_DIR": str(tmp_path / "no-data"),  # no admin-token here
    }
    env.pop("GPUPOOL_TOKEN", None)
    return {**env, **extra}


def _cli(env: dict[str, str], *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        input=input,
    )


def test_login_keeps_the_token_per_head_and_logout_forgets_it(head: HeadProcess, tmp_path: Path) -> None:
    added = head.cli("user", "add", "alice")
    assert added.returncode == 0, added.stderr
    alice = added.stdout.strip().splitlines()[-1]
    env = _env(head, tmp_path)
    creds = tmp_path / "config" / "gpupool" / "credentials.json"

    before = _cli(env, "whoami")
    assert before.returncode == 2 and before.stderr.startswith("error: missing token"), before

    login = _cli(env, "login", head.url + "/", input=alice + "\n")
    assert login.returncode == 0, login.stderr
    assert login.stdout.strip() == f"signed in to {head.url} as alice (member)"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    assert stat.S_IMODE(creds.parent.stat().st_mode) == 0o700
    saved = json.loads(creds.read_text())["heads"]
    assert list(saved) == [head.url]
    assert (saved[head.url]["token"], saved[head.url]["user"], saved[head.url]["role"]) == (alice, "alice", "member")

    # The CLI uses it for this head (GPUPOOL_URL), with no GPUPOOL_TOKEN and no admin-token file.
    who = _cli(env, "whoami", "-o", "json")
    assert who.returncode == 0, who.stderr
    assert json.loads(who.stdout) == {
        "user": "alice",
        "role": "member",
        "scope": "submit",
        "is_admin": False,
        "projects": {},
        "registries": [],
    }
    table = _cli(env, "whoami")
    assert table.stdout.strip() == f"alice (member) at {head.url}; token from {creds}"
    assert _cli(env, "jobs").returncode == 0
    # ... and only for this head: another URL (even one reaching the same head) has no token.
    other = head.url.replace("127.0.0.1", "localhost")
    elsewhere = _cli(env, "whoami", "--url", other)
    assert elsewhere.returncode == 2 and elsewhere.stderr.startswith("error: missing token"), elsewhere

    # GPUPOOL_TOKEN wins over the file.
    admin = _cli({**env, "GPUPOOL_TOKEN": head.token()}, "whoami", "-o", "json")
    assert json.loads(admin.stdout)["user"] == "admin", admin.stderr

    out = _cli(env, "logout")
    assert (out.returncode, out.stdout.strip()) == (0, f"signed out of {head.url}")
    assert not creds.exists()
    after = _cli(env, "whoami")
    assert after.returncode == 2 and after.stderr.startswith("error: missing token"), after
    again = _cli(env, "logout", head.url)
    assert (again.returncode, again.stdout.strip()) == (0, f"not signed in to {head.url}")


def test_a_refused_token_is_not_kept(shared_head: HeadProcess, tmp_path: Path) -> None:
    env = _env(shared_head, tmp_path)
    creds = tmp_path / "config" / "gpupool" / "credentials.json"

    bad = _cli(env, "login", input="gp_not-a-token\n")
    assert bad.returncode == 2, bad
    assert bad.stderr.strip() == (
        f"error: {shared_head.url} refused the token (unknown, expired or revoked, or its user is disabled);"
        " nothing saved"
    )
    assert not creds.exists()
    empty = _cli(env, "login", input="")
    assert empty.returncode == 2 and empty.stderr.startswith("error: no token given"), empty
    assert not creds.exists()

    # A good login, then a bad one: the kept token is left as it was.
    good = _cli(env, "login", input=shared_head.token() + "\n")
    assert good.returncode == 0 and good.stdout.strip() == f"signed in to {shared_head.url} as admin (admin)", good
    kept = creds.read_bytes()
    assert _cli(env, "login", input="gp_not-a-token\n").returncode == 2
    assert creds.read_bytes() == kept
    assert json.loads(_cli(env, "whoami", "-o", "json").stdout)["user"] == "admin"


def test_a_registry_login_is_kept_at_the_head_listed_by_whoami_and_forgotten(
    shared_head: HeadProcess, tmp_path: Path
) -> None:
    """``gpupool login --registry HOST -u USER`` reads the secret from stdin (never argv), the head
    keeps it, ``whoami`` lists the registry and the user but not the secret, and logout forgets it."""
    added = shared_head.cli("user", "add", "rita")
    assert added.returncode == 0, added.stderr
    env = _env(shared_head, tmp_path, GPUPOOL_TOKEN=added.stdout.strip().splitlines()[-1])

    kept = _cli(env, "login", "--registry", "NVCR.io", "--username", "$oauthtoken", input="nvapi-rita-key\n")
    assert kept.returncode == 0, kept.stderr
    assert "the head keeps your login to nvcr.io as $oauthtoken" in kept.stdout
    shown = _cli(env, "whoami")
    assert "registry nvcr.io as $oauthtoken" in shown.stdout and "nvapi-rita-key" not in shown.stdout
    listed = json.loads(_cli(env, "whoami", "-o", "json").stdout)["registries"]
    assert [(r["registry"], r["username"]) for r in listed] == [("nvcr.io", "$oauthtoken")]

    for bad, said in (
        (("--registry", "nvcr.io"), "give the registry user with --username"),
        (("--username", "x"), "--username goes with --registry"),
        (("--registry", "https://nvcr.io", "-u", "x"), "without a scheme"),
    ):
        refused = _cli(env, "login", *bad, input="s\n")
        assert refused.returncode == 2 and said in refused.stderr, refused
        assert "Traceback" not in refused.stderr

    gone = _cli(env, "logout", "--registry", "nvcr.io")
    assert gone.returncode == 0 and "forgot your login to nvcr.io" in gone.stdout, gone
    again = _cli(env, "logout", "--registry", "nvcr.io")
    assert again.returncode == 2 and "rita has no login to nvcr.io" in again.stderr, again
    assert json.loads(_cli(env, "whoami", "-o", "json").stdout)["registries"] == []

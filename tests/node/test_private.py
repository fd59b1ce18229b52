"""Owner-only files and directories (``node/private.py``), whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.node import private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_private_dir_makes_every_new_level_0700_and_tightens_those_below_the_root(
    tmp_path: Path, loose_umask: None
) -> None:
    os.chmod(tmp_path, 0o755)
    root = tmp_path / "node"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    leaf = private.private_dir(root / "runs" / "job-1" / "worker-0", below=root)
    assert [mode(p) for p in (root, root / "runs", root / "runs" / "job-1", leaf)] == [0o700] * 4
    assert mode(tmp_path) == 0o755  # above the root: left alone
    private.private_dir(leaf, below=root)  # again: nothing to do, no error


def test_private_dir_stops_at_a_root_it_made_and_tightens_levels_that_were_there(
    tmp_path: Path, loose_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.chmod(tmp_path, 0o755)
    root = tmp_path / "made"  # made by the call itself: nothing above it is touched
    private.private_dir(root / "a" / "b", below=root)
    assert [mode(p) for p in (root, root / "a", root / "a" / "b")] == [0o700] * 3
    assert mode(tmp_path) == 0o755
    os.chmod(root / "a", 0o755)  # a level that was there, loosened since: closed again
    os.chmod(root, 0o750)
    private.private_dir(root / "a" / "c", below=root)
    assert [mode(p) for p in (root, root / "a", root / "a" / "c")] == [0o700] * 3
    monkeypatch.chdir(tmp_path)  # relative paths, as ``Path.parents`` walks them
    os.chmod(root / "a", 0o755)
    private.private_dir(Path("made/a/d"), below=Path("made"))
    assert mode(root / "a") == 0o700 and mode(root / "a" / "d") == 0o700 and mode(tmp_path) == 0o755
    private.private_dir(Path("other/e"), below=Path("made"))  # not below the root: only what it made
    assert mode(tmp_path / "other") == 0o700 and mode(tmp_path) == 0o755


def test_private_file_and_write_private_are_0600(tmp_path: Path, loose_umask: None) -> None:
    log = private.private_file(tmp_path / "w.log")
    assert mode(log) == 0o600 and log.read_text() == ""
    os.chmod(log, 0o644)
    log.write_text("kept")
    private.private_file(log)
    assert mode(log) == 0o600 and log.read_text() == "kept"
    spec = tmp_path / "spec.json"
    spec.write_text("old")
    os.chmod(spec, 0o644)
    private.write_private(spec, "{}")
    assert mode(spec) == 0o600 and spec.read_text() == "{}"
    private.write_private(spec, "é" * 70_000)  # longer than one write may take
    assert spec.read_text() == "é" * 70_000 and not list(tmp_path.glob(".spec.json.*"))


def test_secure_data_dir_creates_it_0700_or_closes_it_and_its_secrets(tmp_path: Path, loose_umask: None) -> None:
    fresh = tmp_path / "a" / "data"
    private.secure_data_dir(fresh, ("admin-token",))
    assert mode(fresh) == 0o700
    opened = tmp_path / "open"
    opened.mkdir()
    os.chmod(opened, 0o755)
    (opened / "admin-token").write_text("t")
    os.chmod(opened / "admin-token", 0o644)
    private.secure_data_dir(opened, ("admin-token", "absent"))
    assert mode(opened) == 0o700 and mode(opened / "admin-token") == 0o600

"""Sealed secrets (``store/sealing.py``): a key file made 0600 once and read back after, a sealed
secret that is not the secret, and one sealed under another key refused in one sentence."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpupool.domain.errors import Conflict
from gpupool.store.sealing import Sealer


def test_a_key_is_made_once_0600_and_opens_what_it_sealed_after_a_restart(tmp_path: Path) -> None:
    key = tmp_path / "sealing.key"
    sealed = Sealer.at(key).seal("nvapi-secret")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert "nvapi-secret" not in sealed
    assert Sealer.at(key).open(sealed, "a login") == "nvapi-secret"  # the next start reads the same key
    assert Sealer.at(key).seal("nvapi-secret") != sealed  # each seal is new (a fresh IV)


def test_what_another_key_sealed_is_refused_and_says_to_log_in_again(tmp_path: Path) -> None:
    sealed = Sealer.ephemeral().seal("s")
    with pytest.raises(Conflict, match=r"alice.s login to nvcr\.io was sealed with a key this head no longer has"):
        Sealer.at(tmp_path / "k").open(sealed, "alice's login to nvcr.io")

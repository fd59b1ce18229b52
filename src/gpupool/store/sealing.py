"""Secrets the head must give back, sealed at rest (issue 32: users' registry logins).

A token is kept as a hash, since the head only checks it; a registry password must be handed to a
node's pull as it was given, so it is kept encrypted instead (Fernet: AES-128-CBC with an
HMAC-SHA256, from the ``cryptography`` package). The key is a 0600 file in the head's data dir,
never in the database: a dump of the database, or a PostgreSQL server on another machine, holds
no usable secret. A head that lost its key cannot open what it sealed before; the people
concerned log in again (the message says so).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from gpupool.domain.errors import Conflict

KEY_FILE = "sealing.key"  # in the head's data dir, 0600


class Sealer:
    """Seal and open short secrets with one key."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    @classmethod
    def at(cls, path: Path) -> Sealer:
        """The sealer whose key is at ``path``: made there (0600 from its first byte) if there is none."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return cls(path.read_bytes().strip())
        key = Fernet.generate_key()
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        return cls(key)

    @classmethod
    def ephemeral(cls) -> Sealer:
        """A sealer with a key of its own, kept nowhere: what it seals dies with it (a head built in a test)."""
        return cls(Fernet.generate_key())

    def seal(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode()).decode()

    def open(self, sealed: str, what: str) -> str:
        """The secret; Conflict naming ``what`` when it was sealed with another key."""
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            raise Conflict(
                f"{what} was sealed with a key this head no longer has ({KEY_FILE} in its data dir"
                " changed); log in to the registry again",
                code="sealed_with_another_key",
            ) from None

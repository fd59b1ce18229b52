"""The CLI's saved tokens: ``$XDG_CONFIG_HOME/gpupool/credentials.json`` (``~/.config/gpupool``),
one entry per head, keyed by the head's normalised URL (``scheme://host[:port]``)::

    {"heads": {"https://head-host:7070": {"token": "gp_...", "user": "alice", "role": "member",
                                          "saved_at": "2025-01-01T12:00:00+00:00"}}}

``gpupool login`` writes it, ``gpupool logout`` removes an entry. The file is written 0600 from its
first byte (a temporary file in the same dir, renamed over the old one) in a 0700 dir, under a lock
so two logins at once keep both entries. Like ssh with a private key, a file that another user owns
or that its group or others may read is ignored, with a warning, when a token is looked up; the next
``gpupool login`` writes it again 0600.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpupool.client.errors import is_loopback
from gpupool.domain.errors import InvalidInput
from gpupool.paths import default_config_dir

CREDENTIALS_FILE = "credentials.json"
_LOCK_FILE = ".credentials.lock"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalise_url(url: str) -> str:
    """``scheme://host[:port]``, lower case, without a default port, path or trailing slash."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    if scheme not in _DEFAULT_PORTS or not parts.hostname or port == -1:
        raise InvalidInput(f"not a head URL: {url!r}; give one like http://head-host:7070")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}"


def is_local(url: str) -> bool:
    """Whether the URL's host is this machine (a token sent to it does not cross a network)."""
    return is_loopback(urlsplit(url.strip()).hostname or "")


def credentials_path(environ: Mapping[str, str]) -> Path:
    return default_config_dir(environ) / CREDENTIALS_FILE


def stored_token(url: str, environ: Mapping[str, str]) -> str | None:
    """The saved token for the head at ``url``; None without one, or when the file is not to be
    trusted (another user's, readable by others, or not JSON: it says so on stderr)."""
    try:
        key = normalise_url(url)
    except InvalidInput:
        return None
    path = credentials_path(environ)
    try:
        heads = _read(path, strict=True)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _warn(f"ignoring {path}: {exc}")
        return None
    token = heads.get(key, {}).get("token")
    if not isinstance(token, str):
        return None
    return token.strip() or None


def save(url: str, token: str, who: Mapping[str, Any], environ: Mapping[str, str]) -> Path:
    """Keep ``token`` for the head at ``url`` (with whom it signs in as); returns the file's path."""
    key = normalise_url(url)
    path = credentials_path(environ)
    entry = {"token": token, "user": who.get("user"), "role": who.get("role"), "saved_at": _now()}
    with _locked(path.parent, create=True):
        heads = _read_for_update(path)
        heads[key] = entry
        _write(path, heads)
    return path


def remove(url: str, environ: Mapping[str, str]) -> bool:
    """Forget the token for the head at ``url``; False if there was none. The last entry takes
    the file with it."""
    key = normalise_url(url)
    path = credentials_path(environ)
    if not path.parent.is_dir():
        return False
    with _locked(path.parent, create=False):
        heads = _read_for_update(path)
        if heads.pop(key, None) is None:
            return False
        if heads:
            _write(path, heads)
        else:
            path.unlink()
    return True


def _read(path: Path, *, strict: bool) -> dict[str, dict[str, Any]]:
    """The entries of the file. ``strict``: refuse a file another user owns or others may read."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if strict and st.st_uid != os.getuid():
            raise PermissionError(f"it belongs to another user (uid {st.st_uid})")
        if strict and st.st_mode & 0o077:
            mode = stat.S_IMODE(st.st_mode)
            raise PermissionError(f"its mode {mode:04o} lets others read it; chmod 600 it, or gpupool login again")
        data = f.read()
    try:
        heads = json.loads(data)["heads"]
    except (ValueError, KeyError, TypeError):
        raise ValueError('not a gpupool credentials file ({"heads": {URL: {"token": ...}}})') from None
    if not isinstance(heads, dict) or not all(isinstance(v, dict) for v in heads.values()):
        raise ValueError('not a gpupool credentials file ({"heads": {URL: {"token": ...}}})')
    return heads


def _read_for_update(path: Path) -> dict[str, dict[str, Any]]:
    """The entries to rewrite: a loose mode does not matter here, as the new file is 0600."""
    try:
        return _read(path, strict=False)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot update {path}: {exc}; fix or remove it") from None


def _write(path: Path, heads: Mapping[str, Mapping[str, Any]]) -> None:
    import tempfile  # only login and logout write; every command reads

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # 0600, O_EXCL
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            json.dump({"heads": heads}, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(directory: Path, *, create: bool) -> Iterator[None]:
    if create and not directory.is_dir():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)  # whatever the umask
    fd = os.open(directory / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)

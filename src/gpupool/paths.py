"""Where gpupool keeps its files on this machine: the data dir (state, logs, the admin token) and
the user's config dir (the CLI's credentials), read from the environment the caller passes.

Apart from ``settings.py``, which re-exports them, because the settings' knobs load much of the
domain (~35 ms): every CLI command looks its token up here before it makes a request."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

TOKEN_FILE = "admin-token"
JOIN_TOKEN_FILE = "join-token"


def default_data_dir(environ: Mapping[str, str]) -> Path:
    if environ.get("GPUPOOL_DATA_DIR"):
        return Path(environ["GPUPOOL_DATA_DIR"]).expanduser()
    xdg = environ.get("XDG_DATA_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".local" / "share")
    return Path(xdg) / "gpupool"


def default_config_dir(environ: Mapping[str, str]) -> Path:
    """The user's gpupool config dir (the CLI's credentials): ``$XDG_CONFIG_HOME/gpupool``, else
    ``~/.config/gpupool``. A relative XDG_CONFIG_HOME is ignored, as the XDG spec says."""
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if not xdg or not Path(xdg).is_absolute():
        xdg = str(Path(environ.get("HOME", "~")).expanduser() / ".config")
    return Path(xdg) / "gpupool"

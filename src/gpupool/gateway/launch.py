"""Starting the gateway as a process of its own, for ``gpupool up --gateway-port``.

The admin token goes by file (``--token-file``, which must be mode 0600), never by environment or
command line: a command line is readable by every user of the machine, and an environment is
inherited by whatever the gateway might start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpupool.gateway.main import TOKEN_ENV


def start_gateway(
    port: int, head_url: str, token_file: Path, *, host: str = "127.0.0.1", extra: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``python -m gpupool.gateway`` reading the route table from ``head_url``; the caller
    stops it (terminate, then wait). It prints one ready line to its stdout when it listens."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    command = [sys.executable, "-m", "gpupool.gateway", "--host", host, "--port", str(port)]
    command += ["--head", head_url, "--token-file", str(token_file), *(extra or [])]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, start_new_session=True)

"""Starting the gateway as a process of its own, for ``gpupool up --gateway-port``.

The admin token goes by file (``--token-file``, which must be mode 0600), never by environment or
command line: a command line is readable by every user of the machine, and an environment is
inherited by whatever the gateway might start.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

from gpupool.gateway.main import TOKEN_ENV


def start_gateway(
    port: int, head_url: str, token_file: Path, *, host: str = "127.0.0.1", extra: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``python -m gpupool.gateway`` reading the route table from ``head_url``; the caller
    stops it (terminate, then wait). It prints one ready line to its stdout when it listens, and
    stops by itself when the calling process is gone (``--parent``: a head killed by SIGKILL
    leaves no gateway behind)."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    command = [sys.executable, "-m", "gpupool.gateway", "--host", host, "--port", str(port)]
    command += ["--head", head_url, "--token-file", str(token_file), "--parent", str(os.getpid()), *(extra or [])]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, start_new_session=True)


def ready_url(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> str:
    """The URL of the ready line ``proc`` prints, or ``RuntimeError`` (with its exit code) when it
    exits or stays silent ``timeout_s`` first: it could not listen, or refused its options."""
    assert proc.stdout is not None
    ready = select.select([proc.stdout], [], [], timeout_s)[0]
    line = proc.stdout.readline().decode(errors="replace") if ready else ""
    if not line.startswith("gpupool gateway ready at "):
        if not ready:
            proc.kill()
        code = proc.wait(timeout=10)
        raise RuntimeError(f"the gateway did not start (exit code {code}; its reason is on stderr above)")
    return line.split()[4]

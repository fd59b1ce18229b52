"""Run as a job: connect to each HOST:PORT given and print ``DIALED HOST:PORT ERRNO`` (0: it
connected). The port-wall tests read what another job could reach."""

from __future__ import annotations

import socket
import sys

if __name__ == "__main__":
    for target in sys.argv[1:]:
        host, port = target.rsplit(":", 1)
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
            print("DIALED", target, 0, flush=True)
        except OSError as e:
            print("DIALED", target, -1 if e.errno is None else e.errno, flush=True)  # -1: timed out


def dialed(log: str) -> dict[str, int]:
    """What a dial job printed: target -> errno (0: connected)."""
    return {ln.split()[1]: int(ln.split()[2]) for ln in log.splitlines() if ln.startswith("DIALED ")}

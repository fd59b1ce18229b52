"""``gpupool up --gateway-processes 2``: the head starts a gateway of two processes on one port,
which answers, and none of them outlives the head, stopped (SIGTERM) or killed (SIGKILL)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.headproc import HeadProcess


def _gateway_processes(head_pid: int) -> list[int]:
    """The processes whose command line runs ``gpupool.gateway`` under ``--parent head_pid``, and
    the ones those forked."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = stat.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gpupool.gateway" in argv and str(head_pid).encode() in argv:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_gateway_of_two_processes_answers_and_ends_with_the_head(tmp_path: Path, sig: int) -> None:
    head = HeadProcess(tmp_path / "data", nodes=1, gateway=True, extra=["--gateway-processes", "2"]).start()
    try:
        assert head.proc is not None
        gateways = _gateway_processes(head.proc.pid)  # the first (its command line is the forked one's too)
        assert len(gateways) == 2, gateways
        for _ in range(4):  # new connections, spread by the kernel over both processes
            assert httpx.get(f"{head.gateway_url}/-/healthz", timeout=10).status_code == 200
        head.stop(sig=sig)
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in gateways) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in gateways), "a gateway process outlived the head"
    finally:
        head.kill_everything()

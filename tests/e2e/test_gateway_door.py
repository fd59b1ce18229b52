"""The gateway's door is the API's (issue 30, part 4), on a real head's gateway over raw sockets:
slow headers and idle sockets are cut off after the head's --client-timeout (a slow body too:
tests/gateway/test_faults.py, where a replica can wait for it), no more
than --max-connections are served at once (then 503), a revoked token stops working through the
gateway within about a second, and where the head serves HTTPS the gateway does too."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import REPLICA_SERVER
from tests.support.headproc import HeadProcess, wait_for

pytestmark = pytest.mark.e2e

SERVER = REPLICA_SERVER


def _gateway(head: HeadProcess) -> tuple[str, int]:
    host, port = head.gateway_url.split("//")[1].rsplit(":", 1)
    return host, int(port)


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """How long until the gateway closes ``sock`` (the first recv that returns nothing, or a reset)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, TimeoutError):
        pass
    return time.monotonic() - started


def test_slow_heads_idle_sockets_and_too_many_connections_are_cut_off(
    head_factory: type[HeadProcess],
) -> None:
    head = head_factory(gateway=True, extra=["--client-timeout", "1s", "--max-connections", "16"]).start()
    where = _gateway(head)
    slow = [socket.create_connection(where, timeout=10) for _ in range(10)]
    for sock in slow:
        sock.sendall(b"GET /x/ HTTP/1.1\r\nHost: g\r\n")  # and never the blank line
    idle = [socket.create_connection(where, timeout=10) for _ in range(5)]
    third = socket.create_connection(where, timeout=10)
    third.sendall(b"GET /-/healthz HTTP/1.1\r\nHost: g\r\n\r\n")
    assert b"200 OK" in third.recv(4096)  # served: 16 at once is the cap (10 + 5 + this one)
    over = socket.create_connection(where, timeout=10)
    said = over.recv(4096)
    assert said.startswith(b"HTTP/1.1 503") and b"overloaded" in said, said  # the 17th
    took = [_closed_within(s, 5) for s in [*slow, *idle, third]]
    assert max(took) < 3.5, took  # a second to send a head, whether anything was sent or not
    for sock in [*slow, *idle, third, over]:
        sock.close()
    after = httpx.get(f"{head.gateway_url}/-/healthz", timeout=5)
    assert after.status_code == 200  # the door let go of every slot


def test_a_revoked_token_stops_working_through_the_gateway_within_about_a_second(
    head_factory: type[HeadProcess],
) -> None:
    head = head_factory(gateway=True).start()
    out = head.cli("serve", "private", "--gpus", "0", "--", sys.executable, SERVER)
    assert out.returncode == 0, out.stderr
    made = json.loads(head.cli("token", "create", "--name", "soon-gone", "-o", "json").stdout)
    url = f"{head.gateway_url}/private/pid"
    auth = {"Authorization": f"Bearer {made['token']}"}
    wait_for(lambda: httpx.get(url, headers=auth, timeout=5).status_code == 200, 60, 0.2, "the service to answer")
    assert head.cli("token", "revoke", str(made["id"])).returncode == 0
    revoked = time.monotonic()
    wait_for(lambda: httpx.get(url, headers=auth, timeout=5).status_code == 401, 10, 0.02, "the token to be refused")
    took = time.monotonic() - revoked
    print(f"a revoked token was refused through the gateway {took:.2f}s after the revoke answered")
    assert took < 3.0  # about a second (half a second at the head, half at the gateway), with a generous margin


def test_where_the_head_serves_https_so_does_the_gateway(head_factory: type[HeadProcess], tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    make = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run(
        [*make, "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    head = head_factory(gateway=True, extra=["--tls-cert", str(cert), "--tls-key", str(key)]).start()
    assert head.gateway_url.startswith("https://"), head.gateway_url
    trusted = ssl.create_default_context(cafile=str(cert))
    assert httpx.get(f"{head.gateway_url}/-/healthz", verify=trusted, timeout=5).status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{head.gateway_url.replace('https', 'http', 1)}/-/healthz", timeout=5)  # no plain HTTP


def test_the_heads_sign_in_limit_is_the_gateways(head_factory: type[HeadProcess]) -> None:
    """``gpupool up --sign-in-limit 0`` (no limit) holds at the gateway too: guesses through it are
    401s, never 429 (the gateway's own default limit used to answer them)."""
    from gpupool.domain.signins import LIMIT

    head = head_factory(gateway=True, extra=["--sign-in-limit", "0"]).start()
    with httpx.Client(base_url=head.gateway_url, timeout=10) as gateway:
        answers = {
            gateway.get("/metrics", headers={"Authorization": f"Bearer gp_guess{i}"}).status_code
            for i in range(LIMIT + 5)
        }
    assert answers == {401}

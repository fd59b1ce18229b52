"""The head's own credentials are the head's (issue 30, part 5): a token revokes only tokens its
own scope covers, so an admin's narrow token cannot take the head's admin token away; the gateway
runs on an identity of its own that no token route can revoke, and keeps learning routes; a head
whose file token stopped working says so at start and mends it."""

from __future__ import annotations

import json
import sys

import httpx
import pytest

from tests.support import REPLICA_SERVER
from tests.support.headproc import HeadProcess, wait_for

pytestmark = pytest.mark.e2e


def _tokens(head: HeadProcess, token: str | None = None) -> list[dict[str, object]]:
    out = head.cli("token", "list", "-o", "json", token=token)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


def test_a_narrow_token_cannot_revoke_a_wider_one_and_the_gateway_outlives_the_admin_token(
    head_factory: type[HeadProcess],
) -> None:
    head = head_factory(gateway=True).start()
    admin = head.token()
    made = head.cli("token", "create", "--scope", "submit", "--name", "narrow", "-o", "json")
    assert made.returncode == 0, made.stderr
    narrow = json.loads(made.stdout)["token"]
    head_token_id = next(t["id"] for t in _tokens(head) if t["scope"] in (None, "admin"))
    refused = head.cli("token", "revoke", str(head_token_id), token=narrow)
    assert refused.returncode == 2 and "wider than this token's submit" in refused.stderr, refused
    assert head.cli("jobs").returncode == 0  # the head's token still works
    narrow_id = json.loads(made.stdout)["id"]
    assert head.cli("token", "revoke", str(narrow_id), token=narrow).returncode == 0  # its own scope: yes

    # Even the admin's full token revoking the head's own admin token leaves the gateway working.
    second = json.loads(head.cli("token", "create", "--name", "spare", "-o", "json").stdout)["token"]
    assert head.cli("token", "revoke", str(head_token_id), token=second).returncode == 0
    assert head.cli("jobs").returncode == 2  # the file token is gone now
    server = REPLICA_SERVER
    served = head.cli("serve", "echo", "--gpus", "0", "--public", "--", sys.executable, server, token=second)
    assert served.returncode == 0, served.stderr
    wait_for(
        lambda: httpx.get(f"{head.gateway_url}/echo/healthz", timeout=5).status_code == 200,
        60,
        0.3,
        "the gateway to learn the new route",
    )
    assert admin not in (head.data_dir / "gateway-token").read_text()

    # A restart mends the file token, and says so.
    head.stop()
    head.start()
    wait_for(lambda: "no longer worked (revoked or expired): a new one was made" in "".join(head.output), 10)
    assert head.cli("jobs").returncode == 0

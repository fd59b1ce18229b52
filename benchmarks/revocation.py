"""How soon a token stops working once it is revoked, its user disabled, or its user removed from a
service's project: through the API and through the gateway (issue 30, part 4; docs/guide/users-and-tokens.md
promises under a second). Each case is tried ``--rounds`` times; the figure is from the answer to the revoke
(disable, removal) until the first refused request, polled every 10 ms.

    .venv/bin/python benchmarks/revocation.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from _head import machine, machine_line, running_head

SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "e2e" / "replica_server.py")


def gateway_url(lines: list[str]) -> str:
    for line in lines:
        if line.startswith("gateway: "):
            return line.split()[1]
    raise RuntimeError("the head started no gateway")


def refused_after(check: str, token: str, lose: Callable[[], object]) -> float:
    """Seconds from ``lose()`` (which takes the token's right away) to the first 401 or 403."""
    lose()
    started = time.monotonic()
    while True:
        status = httpx.get(check, headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code
        if status in (401, 403):
            return time.monotonic() - started
        if time.monotonic() - started > 30:
            raise RuntimeError(f"{check} still answers {status} 30 s after")
        time.sleep(0.01)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {}
    # Every refused poll is a failed sign-in from this address: no limit, or 429 would hide the figure.
    with running_head(nodes=1, gpus=1, extra_args=["--gateway-port", "0", "--sign-in-limit", "0"]) as head:
        gateway = gateway_url(head.stdout_lines)
        admin = httpx.Client(base_url=head.url, headers={"Authorization": f"Bearer {head.token}"}, timeout=30)
        admin.put("/api/v1/projects/lab", json={"quota": 0}).raise_for_status()
        service = {"name": "svc", "project": "lab", "command": [sys.executable, SERVER], "replicas": 1, "gpus": 0}
        admin.post("/api/v1/services", json=service).raise_for_status()
        while httpx.get(f"{gateway}/svc/pid", headers=admin.headers, timeout=10).status_code != 200:
            time.sleep(0.2)
        api, through = f"{head.url}/api/v1/jobs", f"{gateway}/svc/pid"
        for n in range(args.rounds):
            user = f"u{n}"
            token = admin.post("/api/v1/users", json={"name": user}).json()["token"]
            admin.put(f"/api/v1/projects/lab/members/{user}", json={"role": "member"}).raise_for_status()

            def spare(name: str, check: str, user: str = user) -> tuple[str, Callable[[], object]]:
                made = admin.post("/api/v1/tokens", json={"user": user, "name": name}).json()
                httpx.get(check, headers={"Authorization": f"Bearer {made['token']}"}, timeout=10)  # known there
                return made["token"], lambda: admin.delete(f"/api/v1/tokens/{made['id']}")

            cases: list[tuple[str, str, str, Callable[[], object]]] = [
                ("revoked, API", api, *spare("api", api)),
                ("revoked, gateway", through, *spare("gw", through)),
            ]
            httpx.get(through, headers={"Authorization": f"Bearer {token}"}, timeout=10)
            cases.append(
                (
                    "removed from the project, gateway",
                    through,
                    token,
                    lambda u=user: admin.delete(f"/api/v1/projects/lab/members/{u}"),
                )
            )
            cases.append(("user disabled, API", api, token, lambda u=user: admin.post(f"/api/v1/users/{u}/disable")))
            for what, check, tok, lose in cases:
                figures.setdefault(what, []).append(refused_after(check, tok, lose))
    print(f"a token's rights lost -> first refusal, {args.rounds} rounds each (poll every 10 ms)")
    print(machine_line(machine()))
    for what, took in figures.items():
        took.sort()
        print(f"  {what:<36} median {statistics.median(took) * 1000:6.0f} ms   max {took[-1] * 1000:6.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m gpupool.gateway`` as a process: it says when it is ready, serves a static table, and
refuses bad options and a token file others may read in one line (exit code 2)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.gateway.replicas import route


def _gateway(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "gpupool.gateway", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_serves_a_static_table_and_stops_on_sigterm(tmp_path: Path) -> None:
    routes = tmp_path / "routes.json"
    doc = route("svc", [])
    routes.write_text(json.dumps({"routes": [doc]}))
    proc = _gateway("--routes", str(routes), "--port", "0")
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("gpupool gateway ready at http://127.0.0.1:"), ready
        url = ready.split()[4]
        assert httpx.get(f"{url}/-/healthz").json() == {"status": "ok", "routes": 1}
        nobody = httpx.get(f"{url}/svc/")
        assert nobody.status_code == 503 and nobody.json()["code"] == "no_replica"
        assert "gpupool_gateway_queue_length" in httpx.get(f"{url}/metrics").text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
        proc.communicate()


def test_bad_options_get_one_line_and_exit_2(tmp_path: Path) -> None:
    routes = tmp_path / "routes.json"
    routes.write_text('{"routes": [{"name": "x"}]}')
    token = tmp_path / "token"
    token.write_text("gp_admin")
    token.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if k != "GPUPOOL_GATEWAY_TOKEN"}
    cases = [
        ((), "give either --head URL or --routes FILE"),
        (("--routes", str(routes)), "routes[0]: kind must be"),
        (("--routes", str(tmp_path / "none.json")), "No such file"),
        (("--head", "http://127.0.0.1:1"), "--token-file FILE"),
        (("--head", "http://127.0.0.1:1", "--token-file", str(token)), "chmod 600"),
        (("--routes", str(routes), "--max-body", "lots"), "malformed size"),
        (("--routes", str(routes), "--sign-in-limit", "-1"), "--sign-in-limit -1: must be 0..100000"),
    ]
    for args, says in cases:
        proc = _gateway(*args, "--port", "0", env=env)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 2, (args, err)
        assert says in err and len(err.strip().splitlines()) == 1, (args, err)

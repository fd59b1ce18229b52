"""Secrets out of reach (issue 14): a job sees the allow-list of the head's environment, its own
--env and gpupool's variables, never the rest; the data dir, its database and tokens, each run
directory, spec and log are readable by their owner only."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e

PRINT_ENV = "import json, os; print('ENV=' + json.dumps(dict(os.environ)))"
HEAD_SECRETS = {"GPUPOOL_SECRET_PROBE": "xyz", "AWS_SECRET_ACCESS_KEY": "fake-aws-key", "RAY_AUTH_TOKEN": "fake-ray"}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_job_sees_the_allow_list_its_env_and_gpupools_never_the_heads_secrets(
    head_factory: type[HeadProcess], tmp_path: Path
) -> None:
    head = head_factory(extra_env={**HEAD_SECRETS, "LC_ALL": "C.UTF-8", "NCCL_DEBUG": "WARN"}).start()
    with head.client() as c:
        job_id = c.submit(command=[sys.executable, "-c", PRINT_ENV], gpus=1, env={"MY_VAR": "mine"})["id"]
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=30)
        log = c.logs(job_id, worker=0).data.decode()
    assert job["state"] == "succeeded", log
    (line,) = [x for x in log.splitlines() if x.startswith("ENV=")]
    env = json.loads(line.removeprefix("ENV="))
    assert env["PATH"] == os.environ["PATH"]
    assert env["MY_VAR"] == "mine"
    assert env["GPUPOOL_JOB_ID"] == str(job_id)
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, job["placements"][0]["gpus"]))
    assert (env["LC_ALL"], env["NCCL_DEBUG"]) == ("C.UTF-8", "WARN")  # allowed prefixes pass
    for name in [*HEAD_SECRETS, "GPUPOOL_DATA_DIR", "GPUPOOL_TOKEN", "GPUPOOL_URL", "XDG_CONFIG_HOME"]:
        assert name not in env, name
    assert not any(v in {"xyz", "fake-aws-key", "fake-ray", str(head.data_dir)} for v in env.values())

    # Nothing a job (or another user) can read: the data dir and what it keeps.
    data = head.data_dir
    assert mode(data) == 0o700
    for name in ("gpupool.db", "admin-token", "join-token"):
        assert mode(data / name) == 0o600, name
    node = data / "nodes" / job["placements"][0]["node"]
    (run,) = (node / "runs" / f"job-{job_id}").glob("attempt-*/worker-0")
    for d in (node / "runs", run.parent.parent, run.parent, run, node / "logs", node / "logs" / f"job-{job_id}"):
        assert mode(d) == 0o700, d
    spec = run / "spec.json"
    assert mode(spec) == 0o600
    assert mode(run / "supervisor.err") == 0o600
    assert "fake-aws-key" not in spec.read_text() and "GPUPOOL_DATA_DIR" not in spec.read_text()
    assert mode(node / "logs" / f"job-{job_id}" / "worker-0.log") == 0o600


def test_a_data_dir_left_open_is_closed_at_start(head_factory: type[HeadProcess], tmp_path: Path) -> None:
    data = tmp_path / "open"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    head = head_factory(data_dir=data).start()
    head.stop()
    os.chmod(data / "admin-token", 0o644)
    os.chmod(data / "gpupool.db", 0o644)
    os.chmod(data, 0o755)
    head.start()
    assert mode(data) == 0o700
    assert mode(data / "admin-token") == mode(data / "gpupool.db") == 0o600
    assert "readable by others" in "".join(head.output)

"""Jobs and services in OCI images end to end (issue 32): a real head, its local nodes and real
supervisors, an image made from this machine's own files (tests/support/images.py), the CLI and
the API as a user sees them.

One head for the module (with its gateway) and two images, each built once: the python one, and
the same with a layer of this run's torch for a gang that trains (skipped without torch). Images,
the head's data and work directories live under /var/tmp: a worker's /tmp is its own before it
enters its root, and would hide a node's image cache kept under it. Needs root (other Unix accounts, mounts,
cgroups): skips saying so elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.client import GpupoolClient
from tests.support import rootfs
from tests.support.headproc import HeadProcess, pid_alive, wait_for, wait_state
from tests.support.images import TORCH_EXAMPLE, image_place, python_image, torch_image
from tests.support.unix_accounts import TestAccounts
from tests.support.workers import namespace_alive

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="jobs in images need root (mounts, other Unix accounts, cgroups)"),
]

WAIT = 60
ENDED = ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    with image_place("e2e-images") as path:
        yield path


@pytest.fixture(scope="module")
def image(place: Path) -> str:
    return python_image(place)


@pytest.fixture(scope="module")
def ddp_image(place: Path) -> str:
    """The python image with a layer of this run's torch and examples/ddp_train.py (0.65 GB)."""
    why = rootfs.torch_mismatch()
    if why:
        pytest.skip(f"a job that trains in an image needs torch the image's python can load: {why}")
    return torch_image(place)


@pytest.fixture(scope="module")
def head(place: Path, image: str) -> Iterator[HeadProcess]:
    made = HeadProcess(place / "data", nodes=2, gpus=2, gateway=True).start()
    yield made
    made.kill_everything()


@pytest.fixture(scope="module")
def client(head: HeadProcess) -> Iterator[GpupoolClient]:
    with head.client() as c:
        yield c


@pytest.fixture(scope="module")
def ann(head: HeadProcess, client: GpupoolClient, place: Path, unix_accounts: TestAccounts) -> tuple[str, str]:
    """ann's Unix account and token."""
    account = unix_accounts.make("ann")
    token = str(client.add_user("ann", unix_user=account)["token"])
    return account, token


def _submit(head: HeadProcess, *args: str, token: str | None = None) -> int:
    out = head.cli("submit", "--gpus", "0", *args, token=token)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def _log(client: GpupoolClient, job_id: int, worker: int = 0) -> str:
    return client.logs(job_id, worker=worker).data.decode()


def _said(client: GpupoolClient, job_id: int, key: str, worker: int = 0) -> str:
    """The value of the job's ``KEY=value`` line, once it printed one."""

    def line() -> str | None:
        return next((ln for ln in _log(client, job_id, worker).splitlines() if ln.startswith(key + "=")), None)

    return str(wait_for(line, WAIT, 0.1, f"job {job_id} to print {key}=")).split("=", 1)[1]


def _ended(client: GpupoolClient, job_id: int) -> dict[str, Any]:
    return wait_state(client, job_id, ENDED, timeout=WAIT)


def test_a_job_runs_in_its_image_as_its_owner_and_show_names_the_image_and_its_digest(
    head: HeadProcess, client: GpupoolClient, image: str, ann: tuple[str, str], place: Path
) -> None:
    account, token = ann
    work = place / "ann-work"
    work.mkdir(mode=0o755, exist_ok=True)
    shutil.chown(work, account)
    probe = (
        "import os, pwd, sys; print('ID=' + pwd.getpwuid(os.getuid()).pw_name); print('CWD=' + os.getcwd());"
        " print('VAR=' + os.environ.get('IMAGE_VAR', '')); print('PREFIX=' + sys.prefix)"
    )
    job_id = _submit(head, "--image", image, "--workdir", str(work), "--", "python3", "-c", probe, token=token)
    job = _ended(client, job_id)
    log = _log(client, job_id)
    assert job["state"] == "succeeded", log
    assert job["run_as"] == account and _said(client, job_id, "ID") == account  # the owner's line in its passwd
    assert _said(client, job_id, "CWD") == str(work)  # bound at the same path
    assert _said(client, job_id, "VAR") == "from-image"  # the image's ENV
    assert _said(client, job_id, "PREFIX") == "/usr"

    shown = json.loads(head.cli("show", str(job_id), "-o", "json").stdout)
    assert shown["image"] == image
    assert shown["image_digest"].startswith("sha256:") and len(shown["image_digest"]) == 71, shown["image_digest"]
    assert f"running in image {image} ({shown['image_digest']})" in log
    table = head.cli("show", str(job_id)).stdout
    field = " ".join(table.split("\nimage ", 1)[1].split("\nresources ", 1)[0].split())  # wrapped at 80 columns
    assert field == f"{image} ({shown['image_digest'][:19]})", table


@pytest.mark.parametrize("bad", ["Not An Image", "UPPER/Case:tag", "oci:relative/dir", "python:3.11@sha256:abc"])
def test_a_malformed_image_is_refused_in_one_line_and_with_a_400(head: HeadProcess, bad: str) -> None:
    out = head.cli("submit", "--gpus", "0", "--image", bad, "--", "true")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out
    assert "--image" in out.stderr and "Traceback" not in out.stderr, out.stderr
    admin = {"Authorization": f"Bearer {head.token()}"}
    body = {"command": ["true"], "gpus": 0, "image": bad}
    refused = httpx.post(f"{head.url}/api/v1/jobs", json=body, headers=admin, timeout=10)
    assert refused.status_code == 400 and set(refused.json()) == {"code", "message"}, refused.text
    assert "image" in refused.json()["message"]
    served = head.cli("serve", "bad-image", "--gpus", "0", "--image", bad, "--", "true")
    assert served.returncode == 2 and len(served.stderr.strip().splitlines()) == 1, served


def test_an_image_the_node_cannot_get_now_makes_the_job_wait_with_reason_image(
    head: HeadProcess, client: GpupoolClient, place: Path
) -> None:
    """A path not there (a shared file system not mounted yet): not the image's fault; the job goes
    back to waiting, reason image, without using a restart, and its events say why."""
    missing = f"oci:{place / 'no-such-layout'}"
    job_id = _submit(head, "--image", missing, "--", "python3", "-c", "print('NEVER=1')")
    job = wait_for(
        lambda: (j := client.job(job_id))["reason_code"] == "image" and j,
        timeout=60,
        what="the job to wait for its image",
    )
    assert job["state"] == "pending" and job["restarts"] == 0, job
    said = [e for e in client.events(job_id) if e["kind"] == "image"]
    assert said and "no-such-layout" in said[0]["message"], said
    assert "NEVER" not in _log(client, job_id)
    client.cancel(job_id)
    assert wait_state(client, job_id, ("cancelled",))["image_digest"] is None  # nothing ran


def test_an_image_the_node_cannot_get_now_fails_the_job_at_once_under_image_wait_0(place: Path) -> None:
    """``gpupool up --image-wait 0``: no wait at all; the job fails, with why, at its first try."""
    impatient = HeadProcess(place / "data-impatient", nodes=1, gpus=1, extra=["--image-wait", "0"]).start()
    try:
        job_id = _submit(impatient, "--image", f"oci:{place / 'not-here'}", "--", "python3", "-c", "print(1)")
        with impatient.client() as c:
            job = wait_state(c, job_id, ENDED, timeout=WAIT)
            assert (job["state"], job["exit_reason"], job["restarts"]) == ("failed", "image", 0), job
            (said,) = [e["message"] for e in c.events(job_id) if e["kind"] == "failed"]
        assert said.startswith(f"could not get image oci:{place / 'not-here'} (last: ") and "not-here" in said, said
        assert said.endswith("gave up at once (gpupool up --image-wait 0)"), said
    finally:
        impatient.kill_everything()


def test_a_broken_image_fails_the_job_with_reason_image_and_says_why(
    head: HeadProcess, client: GpupoolClient, place: Path
) -> None:
    broken = place / "broken.tar"
    broken.write_bytes(b"this is not a tar archive, nor an OCI image" * 100)
    job_id = _submit(head, "--image", f"oci-archive:{broken}", "--", "python3", "-c", "print('NEVER=1')")
    job = _ended(client, job_id)
    assert (job["state"], job["exit_reason"]) == ("failed", "image"), job
    (said,) = [e for e in client.events(job_id) if e["kind"] == "image"]
    assert "broken.tar" in said["message"], said
    assert "NEVER" not in _log(client, job_id)


def test_a_job_in_an_image_is_held_to_its_memory(head: HeadProcess, client: GpupoolClient, image: str) -> None:
    hog = "x = bytearray(600 * 1024 * 1024); print('ALLOCATED=1')"
    job_id = _submit(head, "--image", image, "--memory", "200M", "--", "python3", "-c", hog)
    job = _ended(client, job_id)
    assert (job["state"], job["exit_code"], job["exit_reason"]) == ("failed", 137, "oom"), job
    assert "ALLOCATED" not in _log(client, job_id)


def test_cancel_of_a_job_in_an_image_leaves_no_process_and_nothing_mounted(
    head: HeadProcess, client: GpupoolClient, image: str, ann: tuple[str, str], place: Path
) -> None:
    """The worker's root is an overlay over the node's cached image, in its own mount namespace:
    once cancelled, no process is left in that namespace and no mount names the image anywhere."""
    _, token = ann
    script = "import os, time; print('PID=%d' % os.getpid(), flush=True); time.sleep(600)"
    # --workdir /: the image's own root, not the host's bound over it (a job sent with no working
    # directory runs in /).
    job_id = _submit(head, "--image", image, "--workdir", "/", "--", "python3", "-c", script, token=token)
    wait_state(client, job_id, ("running",), timeout=WAIT)
    pid = int(_said(client, job_id, "PID"))  # no pid namespace: the host's own pid
    namespace = os.readlink(f"/proc/{pid}/ns/mnt")
    assert namespace != os.readlink("/proc/self/ns/mnt")
    cache = str(head.data_dir / "nodes")
    inside = Path(f"/proc/{pid}/mountinfo").read_text()
    assert "overlay" in inside and cache in inside, inside  # what the host's mountinfo is checked for below

    assert head.cli("cancel", str(job_id), token=token).returncode == 0
    assert _ended(client, job_id)["state"] == "cancelled"
    wait_for(lambda: not pid_alive(pid), WAIT, 0.1, "the worker to be gone")
    wait_for(lambda: not namespace_alive(namespace), WAIT, 0.1, "no process left in the worker's namespace")
    host = Path("/proc/self/mountinfo").read_text()
    assert cache not in host and str(place) not in host, host


def test_a_gang_of_two_in_one_image_trains_the_ddp_example_with_gloo(
    head: HeadProcess, client: GpupoolClient, ddp_image: str
) -> None:
    """torch and the example come from the image's second layer, not the host: each rank meets the
    other at the MASTER_ADDR:MASTER_PORT gpupool gave it (host networking) and the loss falls."""
    train = ["python3", TORCH_EXAMPLE, "--steps", "30", "--device", "cpu"]
    one_thread = ["--env", "OMP_NUM_THREADS=1"]  # a rank: the workers share a small machine's cores
    # Both GPUs of a node a worker: one worker on each node, each node unpacking the image.
    gang = ["--workers", "2", "--gpus", "2", "--image", ddp_image, *one_thread, "--workdir", "/"]
    out = head.cli("submit", *gang, "--", *train)
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.split()[-1])
    job = wait_state(client, job_id, ENDED, timeout=180)  # each node unpacks the 0.65 GB image first
    logs = [_log(client, job_id, w) for w in (0, 1)]
    assert job["state"] == "succeeded", logs
    assert len({p["node"] for p in job["placements"]}) == 2, job["placements"]
    for rank, log in enumerate(logs):
        assert f"rank {rank} of 2: gloo on cpu" in log, log
    steps = [(int(n), float(x)) for n, x in re.findall(r"^step (\d+) loss (\S+)$", logs[0], re.MULTILINE)]
    assert [n for n, _ in steps] == [1, 10, 20, 30], logs[0]
    assert steps[-1][1] < steps[0][1] / 4, steps
    assert "final loss" in logs[0] and "step 1 loss" not in logs[1], "only rank 0 reports the loss"
    assert job["image"] == ddp_image
    assert job["image_digest"] and job["image_digest"].startswith("sha256:"), job


def test_a_service_in_an_image_answers_through_the_gateway(
    head: HeadProcess, client: GpupoolClient, image: str, place: Path
) -> None:
    site = place / "site"
    site.mkdir(mode=0o755, exist_ok=True)
    (site / "hello.txt").write_text("hello from an image\n")
    server = "exec python3 -m http.server --bind 127.0.0.1 $PORT"
    serve = ["serve", "pages", "-o", "json", "--gpus", "0", "--image", image, "--health", "/hello.txt"]
    out = subprocess.run(  # from the site's directory: a service's replicas run where it was served from
        [sys.executable, "-m", "gpupool.cli.main", *serve, "--", "sh", "-c", server],
        capture_output=True, text=True, env=head.env(), cwd=site, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert made["url"] == f"{head.gateway_url}/pages/"

    def ready() -> dict[str, Any] | None:
        s = client.service("pages")
        return s if s["replicas"]["ready"] == 1 else None

    s = wait_for(ready, WAIT, 0.2, "the service in an image to be ready")
    (replica,) = s["replica_list"]
    assert client.job(replica["job_id"])["image"] == image
    admin = {"Authorization": f"Bearer {head.token()}"}
    got = httpx.get(f"{head.gateway_url}/pages/hello.txt", headers=admin, timeout=30)
    assert (got.status_code, got.text) == (200, "hello from an image\n"), got.text
    assert head.cli("service", "delete", "pages").returncode == 0
    wait_for(lambda: client.job(replica["job_id"])["state"] == "cancelled", WAIT, 0.2, "the replica cancelled")

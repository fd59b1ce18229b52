"""Jobs in OCI images through the node runtime and real supervisors (issue 32): the supervisor
gets the image from the node's cache (unpacked once, by digest), then starts the worker in its
root as its owner, inside the same walls, with the image's ENV under the job's and its Cmd when
the job gives none; an image it cannot get ends the worker with exit reason ``image`` and why.

Needs root (other accounts, mounts, cgroups): each test skips saying why elsewhere. Images and
work directories live under /var/tmp: a worker's /tmp is its own before it enters the root."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.node.runtime import NodeRuntime
from tests.support.images import image_place, python_image
from tests.support.unix_accounts import TestAccounts
from tests.support.workers import finish, log, request, said, walled_runtime

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs in images need root (mounts, accounts)")


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    with image_place("test-images") as path:
        yield path


@pytest.fixture(scope="module")
def image(place: Path) -> str:
    return python_image(place)


@pytest.fixture
def rt(place: Path) -> Iterator[NodeRuntime]:
    data = place / f"node-{os.urandom(4).hex()}"
    with walled_runtime("img1", data, 1, base_env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}) as runtime:
        yield runtime
    shutil.rmtree(data, ignore_errors=True)


def test_a_job_runs_in_its_image_as_its_owner_with_the_images_env_under_its_own(
    rt: NodeRuntime, image: str, place: Path, unix_accounts: TestAccounts
) -> None:
    ann = unix_accounts.make("ann")
    work = place / "work"
    work.mkdir(mode=0o755, exist_ok=True)
    shutil.chown(work, ann)
    script = (
        "echo ID=$(id -un); echo CWD=$(pwd); echo VAR=$IMAGE_VAR; echo MINE=$MINE; echo PATHS=$PATH;"
        " echo LANGS=$LANG; echo PY=$(python3 -c 'import sys; print(sys.prefix)');"
        " echo CG=$(cut -d: -f3 /proc/self/cgroup | head -1)"
    )
    req = request(1, script, account=ann, workdir=str(work), image=image, env={"MINE": "job", "LANG": "en_GB"})
    handle = rt.launch(req)
    ended = finish(rt, handle)
    assert ended.exit_code == 0, log(rt, 1)
    assert ended.image_digest is not None and ended.image_digest.startswith("sha256:")
    phase = rt.image_phases([handle])[0]  # what the head's images step reads while the worker runs
    assert phase is not None and phase.digest == ended.image_digest and phase.line.startswith("running in image")
    assert said(rt, 1, "ID") == ann and said(rt, 1, "CWD") == str(work)
    assert said(rt, 1, "VAR") == "from-image" and said(rt, 1, "MINE") == "job"
    assert said(rt, 1, "PATHS") == "/usr/local/bin:/usr/bin:/bin"  # the image's, over the node's default
    assert said(rt, 1, "LANGS") == "en_GB"  # the job's own wins over the image's
    assert said(rt, 1, "PY") == "/usr"
    assert f"gpupool: running in image {image} ({ended.image_digest})" in log(rt, 1)


def test_without_a_command_the_images_cmd_runs(rt: NodeRuntime, image: str, unix_accounts: TestAccounts) -> None:
    ann = unix_accounts.make("ann")
    ended = finish(rt, rt.launch(request(2, "", account=ann, image=image, argv=())))
    assert ended.exit_code == 0, log(rt, 2)
    assert said(rt, 2, "CMD") == "image-default"


def test_two_jobs_of_one_image_unpack_it_once(rt: NodeRuntime, image: str, unix_accounts: TestAccounts) -> None:
    ann = unix_accounts.make("ann")
    first = rt.launch(request(3, "echo A=1", account=ann, image=image))
    second = rt.launch(request(4, "echo A=2", account=ann, image=image))
    assert finish(rt, first).exit_code == 0 and finish(rt, second).exit_code == 0, log(rt, 3) + log(rt, 4)
    unpacked = [line for job in (3, 4) for line in log(rt, job).splitlines() if "unpacking" in line]
    assert 1 <= len(unpacked) <= 2 and sum("layer" in line for line in unpacked) >= 1  # one of them did it
    cache = rt.data_dir / "images"
    digests = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(digests) == 1, digests


def test_an_image_the_node_cannot_get_now_ends_the_worker_with_reason_image_unavailable(
    rt: NodeRuntime, place: Path, unix_accounts: TestAccounts
) -> None:
    ann = unix_accounts.make("ann")
    missing = f"oci:{place / 'no-such-layout'}"
    ended = finish(rt, rt.launch(request(5, "echo NEVER=1", account=ann, image=missing)))
    assert (ended.exit_code, ended.reason) == (125, "image_unavailable")  # not there now: the job waits
    assert ended.note and "no-such-layout" in ended.note, ended.note
    assert "NEVER" not in log(rt, 5) and "not starting the worker" in log(rt, 5)
    registry = finish(rt, rt.launch(request(6, "true", account=ann, image="registry.invalid/team/img:1")))
    assert registry.reason == "image_unavailable" and registry.note, registry  # no skopeo here: it waits


def test_an_image_whose_root_cannot_be_entered_ends_the_worker_with_reason_image(
    rt: NodeRuntime, place: Path, unix_accounts: TestAccounts
) -> None:
    """Its WorkingDir is not in it: the worker cannot enter its root there; the image's fault,
    said as such (reason image, the step in the note), not a job's exit 126 with no why."""
    ann = unix_accounts.make("ann")
    broken = python_image(place / "broken", tag="nowhere", inside="/no/such/dir")
    ended = finish(rt, rt.launch(request(7, "echo NEVER=1", account=ann, image=broken)))
    assert (ended.exit_code, ended.reason) == (126, "image"), log(rt, 7)
    assert ended.note and "entering its image's root" in ended.note and "/no/such/dir" in ended.note, ended.note

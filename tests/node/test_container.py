"""A worker in an image's root (issue 32, ``node/container.py``): through the node runtime and real
supervisors, a job in a root file system built from this machine's own files runs as its owner
with its groups, in its bound working directory, with its private /tmp, the one device it was
given and not another, and nothing of the host's files; what it writes to / is gone with it, and
nothing stays mounted on the host. A gang's second worker lands in the root the first built. An
image's links cannot make root write outside it.

Until the head sends an image (``LaunchRequest.image``), the tests add the container to the spec
the runtime writes (``images`` below). Needs root (mount namespaces, accounts, cgroups)."""

from __future__ import annotations

import errno
import grp
import hashlib
import json
import os
import pwd
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupool.node import container, private, rundir
from gpupool.node.container import ContainerSpec
from gpupool.node.rundir import RunSpec
from gpupool.node.runtime import NodeRuntime
from tests.support import rootfs
from tests.support.unix_accounts import TestAccounts
from tests.support.workers import finish, log, namespace_alive, request, said, walled_runtime

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="entering a root file system needs root")


def test_a_spec_with_a_container_round_trips_and_one_without_reads_as_before() -> None:
    spec = RunSpec(argv=("true",), env={}, log="/l", header="h")
    box = ContainerSpec("/cache/ab/root", ("/dev/nvidia0",), ("/work",), "ann:x:1:1::/h:/bin/sh", "ann:x:1:", 1 << 20)
    assert RunSpec.from_json(spec._replace(container=box).to_json()).container == box
    assert "container" not in json.loads(spec.to_json())
    assert RunSpec.from_json(spec.to_json()).container is None


def test_the_owners_lines_replace_the_images_with_the_same_name_or_number() -> None:
    image = b"root:x:0:0::/root:/bin/sh\nubuntu:x:1000:1000::/home/ubuntu:/bin/sh\nann:x:7:7::/:/bin/sh\n"
    merged = container._merged(image, ["ann:x:1000:1000::/home/ann:/bin/sh"], (0, 2)).decode().splitlines()
    assert merged == ["root:x:0:0::/root:/bin/sh", "ann:x:1000:1000::/home/ann:/bin/sh"]


def test_a_node_without_a_driver_has_no_driver_files() -> None:
    if os.path.exists("/sys/module/nvidia") or os.path.exists("/proc/driver/nvidia"):
        pytest.skip("this node has an NVIDIA driver")
    assert container.driver_files() == ()


def test_driver_files_are_the_versioned_libraries_their_links_and_the_tools(tmp_path: Path) -> None:
    libs, tools = tmp_path / "lib", tmp_path / "bin"
    libs.mkdir()
    tools.mkdir()
    for name in ("libcuda.so.580.159.04", "libnvidia-ml.so.580.159.04", "libz.so.1.2.13", "libcuda.so.570.1"):
        (libs / name).write_bytes(b"")
    (libs / "libcuda.so.1").symlink_to("libcuda.so.580.159.04")
    (libs / "libcuda.so").symlink_to("libcuda.so.1")
    (libs / "libz.so.1").symlink_to("libz.so.1.2.13")
    for name in ("nvidia-smi", "other-tool"):
        (tools / name).write_bytes(b"")
        (tools / name).chmod(0o755)
    found = container._driver_files_in("580.159.04", [str(libs)], str(tools))
    names = ["libcuda.so", "libcuda.so.1", "libcuda.so.580.159.04", "libnvidia-ml.so.580.159.04"]
    assert found == (*(str(libs / n) for n in names), str(tools / "nvidia-smi"))


@pytest.fixture(scope="module")
def image_root() -> Iterator[Path]:
    """Outside /tmp: a worker's /tmp is its own before it enters the root."""
    path = Path(f"/var/tmp/gpupool-test-rootfs-{os.getpid()}")
    yield rootfs.build(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def dev() -> Iterator[Path]:
    """Stand-in GPU device files where the node looks for its GPUs: NVIDIA's major 195, no driver
    behind (opening one the job may open says ENXIO; one walled off, EPERM; one absent, ENOENT)."""
    path = Path(f"/var/tmp/gpupool-test-cdev-{os.getpid()}")
    path.mkdir(mode=0o755, exist_ok=True)
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidia2", 2), ("nvidiactl", 255)):
        os.mknod(path / name, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def rt(tmp_path: Path, dev: Path) -> Iterator[NodeRuntime]:
    with walled_runtime("box1", tmp_path / "node", 3, base_env={"PATH": "/usr/bin:/bin"}, device_dir=dev) as runtime:
        yield runtime


@pytest.fixture
def images(monkeypatch: pytest.MonkeyPatch) -> dict[int, ContainerSpec]:
    """Job id -> the container its workers' specs get, added as the runtime writes the spec."""
    wanted: dict[int, ContainerSpec] = {}
    write = private.write_private

    def with_container(path: Path, text: str) -> None:
        job = path.parts[-4].removeprefix("job-") if path.name == rundir.SPEC else ""
        if job.isdigit() and int(job) in wanted:
            text = RunSpec.from_json(text)._replace(container=wanted[int(job)]).to_json()
        write(path, text)

    monkeypatch.setattr(private, "write_private", with_container)
    return wanted


PROBE = (
    "python3 -c 'import sys\n"
    'def tried(p):\n    try:\n        open(p, "rb").close()\n        return 0\n'
    "    except OSError as e:\n        return e.errno\n"
    'print("ERRNO=" + " ".join(str(tried(p)) for p in sys.argv[1:]))\' '
)


def box(root: Path, account: str, *, devices: tuple[str, ...] = (), binds: tuple[str, ...] = ()) -> ContainerSpec:
    entry = pwd.getpwnam(account)
    groups = [grp.getgrgid(g) for g in os.getgrouplist(account, entry.pw_gid)]
    return ContainerSpec(
        root=str(root),
        devices=devices,
        binds=binds,
        passwd=f"{account}:x:{entry.pw_uid}:{entry.pw_gid}::{entry.pw_dir}:{entry.pw_shell}",
        group="\n".join(f"{g.gr_name}:x:{g.gr_gid}:{','.join(g.gr_mem)}" for g in groups),
        upper_bytes=64 << 20,
    )


def host_mounts(root: Path) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(root) in line]


@root_only
def test_a_worker_runs_in_the_image_as_its_owner_with_its_device_and_nothing_of_the_host(
    rt: NodeRuntime, images: dict[int, ContainerSpec], image_root: Path, dev: Path, unix_accounts: TestAccounts
) -> None:
    ann = unix_accounts.make("ann")
    work = Path(f"/var/tmp/gpupool-test-work-{os.getpid()}")
    work.mkdir(mode=0o755, exist_ok=True)
    shutil.chown(work, ann)
    (work / "data.txt").write_text("in the workdir\n")
    images[1] = box(image_root, ann, devices=(str(dev / "nvidia0"), str(dev / "nvidiactl")), binds=(str(work),))
    script = (
        "echo ID=$(id -u) $(id -G); echo NAME=$(id -un); echo CWD=$(pwd); echo DATA=$(cat data.txt);"
        " echo PY=$(python3 -c 'import sys; print(sys.version_info.major)');"
        f" {PROBE} /dev/nvidia0 /dev/nvidiactl /dev/nvidia1;"
        " echo HOST=$(ls /work /root 2>&1 | grep -c 'No such\\|denied'); echo TMP=$(stat -c '%U %a' /tmp);"
        " echo mark > /var/tmp/mark; echo WROTE=$(cat /var/tmp/mark); echo NS=$(readlink /proc/self/ns/mnt)"
    )
    handle = rt.launch(request(1, script, account=ann, workdir=str(work), gpus="0"))
    try:
        assert finish(rt, handle).exit_code == 0, log(rt, 1)
        entry = pwd.getpwnam(ann)
        groups = " ".join(str(g) for g in os.getgrouplist(ann, entry.pw_gid))
        assert said(rt, 1, "ID") == f"{entry.pw_uid} {groups}"
        assert said(rt, 1, "NAME") == ann  # from the /etc/passwd line written into the image
        assert said(rt, 1, "CWD") == str(work) and said(rt, 1, "DATA") == "in the workdir"
        assert said(rt, 1, "PY") == "3"  # the image's python, from the image's root
        # its GPU and nvidiactl are there (no driver behind them); GPU 1 is not in its /dev at all
        assert said(rt, 1, "ERRNO") == f"{errno.ENXIO} {errno.ENXIO} {errno.ENOENT}"
        assert said(rt, 1, "HOST") == "2"  # /work (the host's, not bound) is absent; /root is the image's, 0700
        assert said(rt, 1, "TMP") == f"{ann} 700"  # the job's private /tmp, from jobns
        assert said(rt, 1, "WROTE") == "mark"
        assert not (image_root / "var/tmp/mark").exists()  # the image is never written
        namespace = said(rt, 1, "NS")
        from tests.support.headproc import wait_for

        wait_for(lambda: not namespace_alive(namespace), timeout=10, what="the job's namespace to go")
        assert host_mounts(image_root) == []
        # A second job of the same image does not see what the first wrote.
        images[2] = box(image_root, ann)
        again = rt.launch(request(2, "ls /var/tmp/mark 2>&1; echo SEEN=$?", account=ann))
        assert finish(rt, again).exit_code == 0, log(rt, 2)
        assert said(rt, 2, "SEEN") != "0"
    finally:
        shutil.rmtree(work, ignore_errors=True)


@root_only
def test_a_gangs_second_worker_lands_in_the_root_the_first_built(
    rt: NodeRuntime, images: dict[int, ContainerSpec], image_root: Path, unix_accounts: TestAccounts
) -> None:
    ann = unix_accounts.make("ann")
    images[3] = box(image_root, ann)
    show = (
        "echo NS=$(readlink /proc/self/ns/mnt); echo NAME=$(id -un); echo HOST=$(ls -d /work 2>&1 | grep -c 'No such')"
    )
    # Launched together: the second may join before the first finished building the root.
    first = rt.launch(request(3, f"echo from-0 > /dev/shm/w0; {show}; sleep 3", account=ann))
    second = rt.launch(request(3, f"sleep 1; echo GOT=$(cat /dev/shm/w0); {show}", account=ann, worker=1))
    assert finish(rt, second).exit_code == 0, log(rt, 3, 1)
    assert finish(rt, first).exit_code == 0, log(rt, 3)
    assert said(rt, 3, "NS", 1) == said(rt, 3, "NS")
    assert said(rt, 3, "GOT", 1) == "from-0"
    for worker in (0, 1):
        assert (said(rt, 3, "NAME", worker), said(rt, 3, "HOST", worker)) == (ann, "1")


def in_child(work: Callable[[], Any]) -> tuple[int, str]:
    """Run ``work`` in a forked child (its own mounts die with it); its exit code and what it wrote."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            os.write(write, str(work()).encode())
        except BaseException as exc:
            os.write(write, f"{type(exc).__name__}: {exc}".encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        said = f.read()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), said


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@root_only
def test_an_images_links_cannot_make_root_write_or_mount_outside_it(tmp_path: Path) -> None:
    outside = Path(f"/var/tmp/gpupool-test-outside-{os.getpid()}")
    outside.mkdir()
    root = Path(f"/var/tmp/gpupool-test-evil-{os.getpid()}")
    root.mkdir(mode=0o755)
    try:
        (root / "etc").symlink_to(outside)  # absolute: the host's directory, were it followed as root
        (root / "proc").symlink_to(f"../../../..{outside}/proc")  # relative, climbing out
        (root / "dev").symlink_to("/root")  # the host's /root, were it followed before the move
        (root / "sys").mkdir()
        before = {p: digest(p) for p in ("/etc/passwd", "/etc/group", "/etc/hosts")}
        spec = ContainerSpec(str(root), passwd="gpt-x:x:4242:4242::/:/bin/sh", upper_bytes=16 << 20)

        def look() -> str:
            container.enter(spec, unshare=True)
            return f"{Path('/etc/passwd').read_text().splitlines()[-1]} {sorted(os.listdir('/'))}"

        code, said = in_child(look)
        assert code == 0, said
        assert said.startswith("gpt-x:x:4242")
        assert list(outside.iterdir()) == []  # nothing written or made through the links
        assert {p: digest(p) for p in before} == before
        assert host_mounts(root) == []
    finally:
        shutil.rmtree(outside, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


@root_only
def test_a_root_that_cannot_be_built_fails_naming_the_step(tmp_path: Path) -> None:
    code, said = in_child(lambda: container.enter(ContainerSpec("/var/tmp/no-such-image-root"), unshare=True))
    assert code == 1 and "no-such-image-root" in said, said


@root_only
def test_what_a_job_writes_to_its_root_is_held_to_the_bound(image_root: Path) -> None:
    spec = ContainerSpec(str(image_root), upper_bytes=8 << 20)

    def fill() -> str:
        container.enter(spec, unshare=True)
        try:
            Path("/var/tmp/big").write_bytes(b"x" * (16 << 20))
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]
        return "written"

    assert in_child(fill) == (0, "ENOSPC")
    assert not (image_root / "var/tmp/big").exists()

"""The parts of the Ray backend that need no Ray: node options, secrets, the failure detector's
settings, and the check of which ports listen beyond loopback."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.executors.ray_processes import (
    NAME_LABEL,
    NodeOptions,
    auth_env,
    check_name,
    ensure_ray_token,
    health_env,
    open_ports,
    ray_temp_dir,
)


def options(name: str = "w1", gpus: int | None = 2) -> NodeOptions:
    return NodeOptions(name, Path("/d") / name, gpus, 1, None, 10.0)


def test_two_nodes_on_one_machine_get_distinct_ports_and_their_own_names() -> None:
    a, b = options("w1").args(), options("w2").args()
    assert f"--labels={NAME_LABEL}=w1" in a and "--num-gpus=2" in a and "--num-cpus=1" in a

    def ports(args: list[str]) -> set[str]:
        return {x.split("=", 1)[1] for x in args if x.split("=")[0].endswith("-port") and not x.endswith("=0")}

    # Six distinct ports each; two nodes' choices can only repeat a port the first has not bound yet,
    # which `gpupool join` rules out by starting nodes one at a time (asserting it here was a flake).
    assert len(ports(a)) == 6 and len(ports(b)) == 6
    assert "--num-gpus" not in " ".join(options(gpus=None).args())  # real GPUs: Ray and NVML find them


def test_node_environment_carries_what_the_actor_needs_and_turns_off_ray_child_killing() -> None:
    env = options().env()
    assert env["GPUPOOL_NODE_DATA_DIR"] == "/d/w1" and env["GPUPOOL_NODE_GPUS"] == "2"
    assert env["RAY_kill_child_processes_on_worker_exit"] == "false"


@pytest.mark.parametrize("name", ["", "-x", "a b", "x/y", "a" * 64])
def test_bad_node_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidInput):
        check_name(name)


def test_the_ray_token_is_private_from_its_first_byte_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "ray" / "auth_token"
    token = ensure_ray_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token) == 64
    assert ensure_ray_token(path) == token
    env = auth_env(path, {"RAY_AUTH_TOKEN": "leaked", "HOME": "/h"})
    assert env == {
        "HOME": "/h",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(path),
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def test_health_checks_declare_a_silent_node_dead_within_about_the_timeout() -> None:
    env = health_env(10.0)
    period = int(env["RAY_health_check_period_ms"]) / 1000
    threshold = int(env["RAY_health_check_failure_threshold"])
    assert period * threshold + int(env["RAY_health_check_timeout_ms"]) / 1000 <= 10.0


def test_a_short_private_session_dir_nobody_could_make_first(tmp_path: Path) -> None:
    """Jobs run as other accounts on the machine: Ray's session (which Ray itself makes 0777) is
    inside a 0700 directory under a random name (not one derived from the data dir, which another
    user could make first), kept for the next start."""
    deep = tmp_path / ("x" * 120) / "ray"
    assert ray_temp_dir(deep) == deep / "no-ray-session"  # nothing made yet: a path where nothing lives
    made = ray_temp_dir(deep, make=True)
    wall = made.parent
    assert len(str(made)) < 50 and wall.parent == Path(tempfile.gettempdir())
    assert stat.S_IMODE(wall.stat().st_mode) == 0o700 and wall.stat().st_uid == os.geteuid()
    assert ray_temp_dir(deep) == ray_temp_dir(deep, make=True) == made  # found again
    other = ray_temp_dir(tmp_path / "ray", make=True)
    assert other.parent != wall
    os.chmod(wall, 0o755)  # no longer private (or another user's): the next start makes a new one
    fresh = ray_temp_dir(deep, make=True)
    assert fresh.parent != wall and stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700
    for d in (wall, other.parent, fresh.parent):
        d.rmdir()


def test_open_ports_reports_listeners_beyond_loopback_only() -> None:
    with socket.socket() as public, socket.socket() as local:
        public.bind(("0.0.0.0", 0))
        public.listen()
        local.bind(("127.0.0.1", 0))
        local.listen()
        found = open_ports({os.getpid()})
        assert f"port {public.getsockname()[1]}" in found
        assert f"port {local.getsockname()[1]}" not in found

"""A pull with the job owner's own registry login (issue 32, ``gpupool login --registry``): the
credentials file the pull uses holds the node's logins with the owner's over them, is root's alone
and gone once the image is got; what a personal login pulled is named the owner's in the cache, so
another user never gets a private image from it without pulling it with a login of their own."""

from __future__ import annotations

import base64
import json
import os
import stat
from dataclasses import replace
from pathlib import Path

from gpupool.domain.launch import LaunchRequest, RegistryAuth
from gpupool.node.image_job import ImageJob
from gpupool.node.image_start import NodePlace, pull_authfile, spec_part
from gpupool.node.images import ImageCache
from tests.support.oci import File, layer, write_layout

MB = 1 << 20
IMAGE = "registry.example.com/team/img:v3"


def _login(owner: str, registry: str, user: str, secret: str) -> dict[str, object]:
    pair = base64.b64encode(f"{user}:{secret}".encode()).decode()
    return {"owner": owner, "registry": registry, "auths": {registry: {"auth": pair}}}


def test_the_pull_sees_the_nodes_logins_with_the_owners_over_them_and_the_file_goes(tmp_path: Path) -> None:
    node_file = tmp_path / "registry-auth.json"
    node_file.write_text(json.dumps({"auths": {"nvcr.io": {"auth": "bm9kZTpu"}, "quay.io": {"auth": "cTpx"}}}))
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    job = ImageJob(IMAGE, str(cache_dir), MB, (), str(node_file), _login("alice", "nvcr.io", "$oauthtoken", "hers"))
    with pull_authfile(job) as path:
        assert path is not None and path != str(node_file)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and os.stat(path).st_uid == os.getuid()
        auths = json.loads(Path(path).read_text())["auths"]
    assert base64.b64decode(auths["nvcr.io"]["auth"]).decode() == "$oauthtoken:hers"
    assert auths["quay.io"] == {"auth": "cTpx"}  # the node's other logins still serve
    assert not os.path.exists(path) and os.listdir(cache_dir) == []
    assert "hers" not in repr(job)
    bare = job._replace(login=None)
    with pull_authfile(bare) as path:
        assert path == str(node_file)  # no login of the owner's: the node's file as it is


def test_what_a_personal_login_pulled_is_the_owners_and_others_pull_it_themselves(tmp_path: Path) -> None:
    write_layout(tmp_path / "registry", [layer({"hello": File(b"hi")})])
    calls = tmp_path / "calls"
    fake = tmp_path / "skopeo"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f'for a; do dest="$a"; done; dest="${{dest#oci:}}"; cp -r {tmp_path / "registry"} "${{dest%:latest}}"\n'
    )
    fake.chmod(0o755)
    cache = ImageCache(str(tmp_path / "cache"), 64 * MB, skopeo=str(fake))

    def pulls() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    hers = cache.get(IMAGE, personal="alice")
    assert pulls() == 1
    assert cache.get(IMAGE, personal="alice").digest == hers.digest and pulls() == 1  # hers, cached
    cache.get(IMAGE, personal="bob")  # his own login: he pulls it himself
    assert pulls() == 2
    cache.get(IMAGE)  # no login: the node's pull (with its own file), never alice's copy
    assert pulls() == 3
    cache.get(IMAGE, personal="carol")  # now the node could get it: anyone may use that copy
    cache.get(IMAGE)
    assert pulls() == 3
    [held] = cache.listing()  # one image on disk: same digest, unpacked once
    assert held.digest == hers.digest
    assert sorted(held.names) == sorted([f"~alice/{IMAGE}", f"~bob/{IMAGE}", IMAGE])
    cache.close()


def test_the_owners_login_reaches_the_spec_of_the_pull_and_not_the_workers_environment(tmp_path: Path) -> None:
    auth = RegistryAuth("alice", "nvcr.io", "$oauthtoken", "nvapi-hers")
    request = LaunchRequest(1, 1, 0, ("python",), {"A": "1"}, None, (0,), (), 0, 1.0, "", image="nvcr.io/x:1")
    place = NodePlace(tmp_path, (), tmp_path, 64 * MB, ())
    env = {"A": "1"}
    part = spec_part(replace(request, registry_auth=auth), env, {}, None, None, place)
    assert part["image"].login == {"owner": "alice", "registry": "nvcr.io", "auths": auth.auth_entry()}
    assert "nvapi-hers" not in json.dumps(env) and "nvapi-hers" not in repr(part["image"])
    assert spec_part(request, dict(env), {}, None, None, place)["image"].login is None

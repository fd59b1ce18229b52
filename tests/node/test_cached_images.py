"""A node's image cache as the head sees it (issue 32): an archive imported through the runtime
(and the local executor) is listed with its name, size and digest; a file that is no OCI image is
refused with the node's sentence and leaves the cache as it was; and the node says in its walls
whether it runs images and how, or why not."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.executors.local import LocalExecutor
from gpupool.node import cached_images
from gpupool.node.runtime import NodeRuntime
from tests.support.node_runtime import runtime
from tests.support.oci import File, layer, write_archive


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[NodeRuntime]:
    node = runtime(tmp_path / "node")
    yield node
    node.close()


def test_an_imported_archive_is_listed_with_its_name_and_digest(rt: NodeRuntime, tmp_path: Path) -> None:
    archive = tmp_path / "stack.tar"
    digest = write_archive(archive, [layer({"hello.txt": File(b"hi\n")})], cmd=("cat", "/hello.txt"))
    assert rt.image_cache.listing() == []

    imported = rt.image_cache.import_archive(str(archive), "stack:v1")

    assert (imported.node, imported.digest, imported.names, imported.busy) == ("n1", digest, ("stack:v1",), False)
    assert imported.size > 0 and imported.last_used.endswith("Z")
    assert rt.image_cache.listing() == [imported]
    # the local executor answers from the same cache; a second name for the same archive is added
    executor = LocalExecutor([rt])
    again = executor.import_image("n1", str(archive), "stack")
    assert again.digest == digest and set(again.names) == {"stack:v1", "stack:latest"}
    assert [i.names for i in executor.images("n1")] == [again.names]


def test_a_file_that_is_no_oci_image_is_refused_with_the_nodes_sentence(rt: NodeRuntime, tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"this is not a tar file at all" * 100)
    with pytest.raises(InvalidInput) as refused:
        rt.image_cache.import_archive(str(junk), "junk")
    assert refused.value.code == "bad_image"
    assert str(junk) in refused.value.message and "\n" not in refused.value.message
    with pytest.raises(InvalidInput, match=r"the OCI archive .*missing.tar is not on this node"):
        rt.image_cache.import_archive(str(tmp_path / "missing.tar"), "missing")
    assert rt.image_cache.listing() == []


def test_the_node_says_whether_it_runs_images_and_how(rt: NodeRuntime) -> None:
    said = rt.describe().isolation["images"]
    why_not = rt.image_cache.why_not
    if why_not is not None:
        assert said.startswith("none (") and why_not in said
        return
    assert said.startswith("OCI, overlay root, cache 200G (gpupool images lists it); ")
    assert ("skopeo is not installed" in said) == (rt.image_cache.skopeo is None)


def test_why_a_node_runs_no_images() -> None:
    assert cached_images._why_not(False, None) == "not root: only root can mount an image's root"
    assert cached_images._why_not(True, "no unshare") == "no mount namespace: no unshare"


def test_overlay_is_found_in_the_kernels_file_systems_or_its_modules(tmp_path: Path) -> None:
    listed = tmp_path / "filesystems"
    listed.write_text("nodev\tsysfs\nnodev\toverlay\n\text4\n")
    assert cached_images.overlay_usable(str(listed), str(tmp_path / "none"))
    listed.write_text("nodev\tsysfs\n\text4\n")
    assert not cached_images.overlay_usable(str(listed), str(tmp_path / "none"))
    (tmp_path / "mods" / os.uname().release / "kernel" / "fs" / "overlayfs").mkdir(parents=True)
    assert cached_images.overlay_usable(str(listed), str(tmp_path / "mods"))

"""`gpupool image import` and `gpupool images` on a real head (issue 32): an admin imports an OCI
archive (a relative FILE, named after it) onto every node, each node lists it, `gpupool nodes` says
how its nodes run images, the audit log names the import, and bad input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess
from tests.support.oci import File, layer, write_archive

pytestmark = pytest.mark.e2e


def test_an_admin_imports_an_archive_and_every_node_lists_it(head: HeadProcess, tmp_path: Path) -> None:
    archive = tmp_path / "work" / "stack.tar"
    archive.parent.mkdir()
    digest = write_archive(archive, [layer({"hello.txt": File(b"hi\n")})], cmd=("cat", "/hello.txt"))
    assert "no node holds an image yet" in head.cli("images").stdout

    imported = _cli_in(head, archive.parent, "image", "import", "stack.tar")  # relative: resolved here
    assert imported.returncode == 0, imported.stderr
    assert "node node-1: imported stack (sha256:" in imported.stdout
    assert "node node-2: imported stack" in imported.stdout
    assert "gpupool submit --image stack -- COMMAND" in imported.stdout

    listed = head.cli("images", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    held = json.loads(listed.stdout)
    assert held["skipped"] == []
    assert [(i["node"], i["digest"], i["names"], i["busy"]) for i in held["images"]] == [
        ("node-1", digest, ["stack:latest"], False),
        ("node-2", digest, ["stack:latest"], False),
    ]
    table = head.cli("images")
    assert table.returncode == 0, table.stderr
    assert "stack:latest" in table.stdout and digest.split(":")[1][:12] in table.stdout, table.stdout

    nodes = head.cli("nodes")
    assert nodes.returncode == 0, nodes.stderr
    lines = [line for line in nodes.stdout.splitlines() if line.startswith("images on ")]
    assert lines == [f"images on node-1, node-2: {lines[0].split(': ', 1)[1]}"], nodes.stdout
    assert lines[0].split(": ", 1)[1].startswith(("OCI, overlay root, cache 200G", "none ("))
    named = json.loads(head.cli("nodes", "-o", "json").stdout)
    assert all("images" in n["isolation"] for n in named)

    audit = json.loads(head.cli("audit", "-o", "json").stdout)
    assert (audit[0]["action"], audit[0]["target"]) == ("images.import", f"image stack from {archive}")


def test_bad_input_is_one_line_and_exit_2(head: HeadProcess, tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not an archive" * 64)
    refused = head.cli("image", "import", str(junk))
    assert refused.returncode == 2 and refused.stderr.startswith("error: cannot read the OCI archive"), refused
    assert len(refused.stderr.strip().splitlines()) == 1
    named = head.cli("image", "import", str(junk), "--name", "Bad Name")
    assert named.returncode == 2 and "NAME or NAME:TAG" in named.stderr, named
    upper = tmp_path / "MyStack.tar"
    upper.write_bytes(b"")
    stem = head.cli("image", "import", str(upper))
    assert stem.returncode == 2 and "give --name NAME" in stem.stderr, stem
    assert json.loads(head.cli("images", "-o", "json").stdout)["images"] == []


def _cli_in(head: HeadProcess, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``gpupool ARGS`` run from ``cwd``, as the head's admin."""
    return subprocess.run(
        [sys.executable, "-m", "gpupool.cli.main", *args],
        capture_output=True,
        text=True,
        env=head.env(),
        timeout=60,
        cwd=cwd,
    )

"""A full disk (issue 15, part 5): on a data dir whose file system fills up, a submission gets a
clear 503 ``disk_full``, nothing half-written, the head keeps serving, and once space is freed it
takes submissions again with its database intact. The file system is a 4 MiB tmpfs the test mounts."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.headproc import HeadProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system to fill needs root; this is not root"),
]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_a_clear_503_and_nothing_is_lost(small_disk: Path) -> None:
    head = HeadProcess(small_disk / "data", nodes=1, gpus=1).start()
    try:
        filler = small_disk / "filler"
        free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        filler.write_bytes(b"\0" * max(0, free - 256 * 1024))  # leave the database 256 KiB to grow in
        headers = {"Authorization": f"Bearer {head.token()}"}
        body = {"command": ["true"], "gpus": 1, "env": {"PAD": "x" * 60_000}}
        answers = []
        with httpx.Client(base_url=head.url, headers=headers, timeout=30) as http:
            for _ in range(40):
                answer = http.post("/api/v1/jobs", json=body)
                answers.append(answer)
                if answer.status_code != 201:
                    break
            full = answers[-1]
            assert full.status_code == 503, [a.status_code for a in answers]
            assert full.json()["code"] == "disk_full" and "free space" in full.json()["message"]
            made = [a.json()["id"] for a in answers if a.status_code == 201]
            assert http.get("/healthz").status_code == 200  # the head goes on serving
            filler.unlink()
            again = http.post("/api/v1/jobs", json=body)
            assert again.status_code == 201, again.text
            listed = {j["id"] for j in http.get("/api/v1/jobs", params={"all": "true"}).json()}
        assert set(made) | {again.json()["id"]} == listed  # every acknowledged job, nothing half-written
        check = sqlite3.connect(small_disk / "data" / "gpupool.db").execute("PRAGMA integrity_check").fetchone()
        assert check == ("ok",)
    finally:
        head.kill_everything()

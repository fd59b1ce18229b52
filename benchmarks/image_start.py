"""What an image costs a job's start (issue 32): from just before the POST until the job's first
command ran (it writes the time to a file in its working directory, bound into the image at the
same path), for a trivial job without ``--image`` and the same job in an image already on the
node (warm cache), interleaved; then the first start of images the node has not seen (the unpack
into the cache): the python image made from this machine's own files (tests/support/images.py,
~39 MB, one uncompressed layer) and the same padded with a gzip'd layer of random files to
~200 MB. Each cold start is a new image (another tag with its own ENV, so its own manifest
digest and its own unpack), the layers unchanged. Also printed: the head's "running", which it
says once the node started the worker's supervisor, before the image is got.

Needs root (images run in their own mount namespace). Images and the head's data live under
/var/tmp: a worker's /tmp is its own before it enters its root, and would hide a cache under it.

    sudo .venv/bin/python benchmarks/image_start.py [--jobs 40] [--cold 3] [--pad-mb 160]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _head import machine, machine_line, running_head, summary_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' image builders
from tests.support import oci, rootfs
from tests.support.images import ENV, padding_layer, python_layer

tempfile.tempdir = "/var/tmp"  # running_head's data dir: not under /tmp (see above)
NOT_YET = {"pending", "starting"}


def start(http: httpx.Client, body: dict[str, Any], stamp: Path, timeout_s: float) -> tuple[float, float]:
    """One job: (seconds to its first command, seconds until the head said it runs)."""
    stamp.unlink(missing_ok=True)
    t0 = time.time()
    job_id = http.post("/api/v1/jobs", json=body).raise_for_status().json()["id"]
    running = None
    while True:
        job = http.get(f"/api/v1/jobs/{job_id}").raise_for_status().json()
        if running is None and job["state"] not in NOT_YET:
            running = time.time() - t0
        if job["state"] in ("succeeded", "failed", "cancelled"):
            break
        if time.time() - t0 > timeout_s:
            raise SystemExit(f"image_start: job {job_id} still {job['state']} after {timeout_s:g} s")
        time.sleep(0.002)
    if job["state"] != "succeeded":
        log = http.get(f"/api/v1/jobs/{job_id}/logs", params={"worker": 0}).text
        raise SystemExit(f"image_start: job {job_id} {job['state']} ({job.get('exit_reason')}): {log}")
    assert running is not None
    return float(stamp.read_text()) - t0, running


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40, help="warm starts measured with and without (default 40)")
    parser.add_argument("--warmup", type=int, default=3, help="of each, run first and not counted (default 3)")
    parser.add_argument("--cold", type=int, default=3, help="first starts of new images, per size (default 3)")
    parser.add_argument("--pad-mb", type=int, default=160, help="random MB added to the big image (default 160)")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up on a job after this many s")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("image_start: needs root (jobs in images run in their own mount namespace)", file=sys.stderr)
        return 2
    place = Path(tempfile.mkdtemp(prefix="gpupool-image-start-"))
    place.chmod(0o755)
    try:
        return measure(args, place)
    finally:
        shutil.rmtree(place, ignore_errors=True)


def measure(args: argparse.Namespace, place: Path) -> int:
    built = time.perf_counter()
    small = python_layer(rootfs.build(place / "rootfs"))
    padding = padding_layer(args.pad_mb)
    layout = place / "layout"
    oci.write_layout(layout, [small], env=ENV, workdir="/", tag="warm")
    built = time.perf_counter() - built
    work = place / "work"
    work.mkdir(mode=0o755)
    stamp = work / "stamp"
    command = ["/bin/sh", "-c", "date +%s.%N > stamp"]
    plain = {"command": command, "gpus": 0, "workdir": str(work), "name": "plain"}
    warm = {**plain, "image": f"oci:{layout}:warm", "name": "warm"}
    took: dict[str, list[float]] = {"plain": [], "warm": []}
    seen: dict[str, list[float]] = {"plain": [], "warm": []}
    cold: dict[str, list[float]] = {"small": [], "big": []}
    with (
        running_head(nodes=1, gpus=8) as head,
        httpx.Client(base_url=head.url, headers={"Authorization": f"Bearer {head.token}"}, timeout=30) as http,
    ):
        for index in range(args.warmup + args.jobs):  # interleaved: a busy machine slows both alike
            for kind, body in (("plain", plain), ("warm", warm)):
                first, running = start(http, body, stamp, args.timeout)
                if index >= args.warmup:
                    took[kind].append(first)
                    seen[kind].append(running)
        for index in range(args.cold):
            for kind, layers in (("small", [small]), ("big", [small, padding])):
                tag = f"{kind}-{index}"
                oci.write_layout(layout, layers, env=(*ENV, f"BENCH_TAG={tag}"), workdir="/", tag=tag)
                body = {**plain, "image": f"oci:{layout}:{tag}", "name": tag}
                cold[kind].append(start(http, body, stamp, args.timeout)[0])
    print(f"image start: submit -> the job's first command ran ({args.jobs} jobs each, interleaved, +{args.warmup})")
    print(machine_line(machine()))
    print(f"  images built in {built:.1f} s: {len(small) / 1e6:.1f} MB and {(len(small) + len(padding)) / 1e6:.1f} MB")
    for kind, label in (("plain", "without --image"), ("warm", "--image, warm cache")):
        first, running = summary_ms(took[kind]), summary_ms(seen[kind])
        print(
            f"  {label:<28} p50 {first['p50']:7.1f} ms  p90 {first['p90']:7.1f} ms"
            f"   (head says running: p50 {running['p50']:6.1f} ms)"
        )
    extra = summary_ms(took["warm"])["p50"] - summary_ms(took["plain"])["p50"]
    print(f"  a warm image adds {extra:+.1f} ms at p50 (target: at most +100 ms)")
    print(f"first start of a new image (the unpack), {args.cold} each:")
    for kind, size in (("small", len(small)), ("big", len(small) + len(padding))):
        figures = summary_ms(cold[kind])
        print(f"  {size / 1e6:6.1f} MB image             p50 {figures['p50']:7.1f} ms  max {figures['max']:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

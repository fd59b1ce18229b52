"""A job in an OCI image on the real GPUs (issue 32): the image is made from this machine's own
files (no CUDA inside: the driver's libraries and nvidia-smi come from the node, bound in as
NVIDIA's CDI generator finds them), and a --gpus 1 job in it sees exactly one GPU: one GPU device
file in its /dev, one GPU in nvidia-smi, the driver's library at the node's path."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpupool.node.container import driver_files
from tests.support.gpu_jobs import ended, log, said, submit
from tests.support.headproc import HeadProcess


@pytest.fixture(scope="module")
def image_ref() -> Iterator[str]:
    from tests.support.images import image_place, python_image

    with image_place("gpu-image") as place:
        yield python_image(place)


def test_a_job_in_an_image_sees_exactly_its_gpu(gpu_head: HeadProcess, image_ref: str) -> None:
    files = driver_files()
    print("driver files bound into images:", len(files), [f for f in files if "smi" in f or "libcuda.so.1" in f])
    smi = next((f for f in files if f.endswith("/nvidia-smi")), None)
    cuda = next((f for f in files if f.endswith("/libcuda.so.1")), None)
    assert smi is not None and cuda is not None, files
    libdir = os.path.dirname(cuda)
    script = (
        "echo DEVS=$(ls /dev | grep -c '^nvidia[0-9]'); echo CVD=$CUDA_VISIBLE_DEVICES;"
        f" echo SMI=$({smi} -L | grep -c '^GPU '); echo LIB=$(ls {cuda} >/dev/null && echo yes)"
    )
    job_id = submit(
        gpu_head, "--gpus", "1", "--image", image_ref, "--env", f"LD_LIBRARY_PATH={libdir}", "--", "sh", "-c", script
    )
    done = ended(gpu_head, job_id)
    print(f"job {job_id}:", " ; ".join(ln for ln in log(gpu_head, job_id).splitlines() if "=" in ln))
    assert done["state"] == "succeeded", log(gpu_head, job_id)
    assert str(done["image_digest"]).startswith("sha256:")
    assert said(gpu_head, job_id, "DEVS") == "1" and said(gpu_head, job_id, "CVD") == "0"
    assert said(gpu_head, job_id, "SMI") == "1" and said(gpu_head, job_id, "LIB") == "yes"

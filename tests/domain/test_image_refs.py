"""Image references (domain/images.py, issue 32): every form --image takes is read, and what is
not an image reference is refused at submit with one sentence, before any node is asked."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.images import MAX_REF, BadImageRef, ImageRef, parse_ref
from gpupool.domain.jobs import JobSpec

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("python:3.11", ImageRef("named", "python", "3.11")),
        ("mystack", ImageRef("named", "mystack")),
        ("nvcr.io/nvidia/pytorch:24.10-py3", ImageRef("named", "nvcr.io/nvidia/pytorch", "24.10-py3")),
        ("localhost:5000/team/img", ImageRef("named", "localhost:5000/team/img")),
        (f"ghcr.io/org/app@{DIGEST}", ImageRef("named", "ghcr.io/org/app", None, DIGEST)),
        (f"python:3.11@{DIGEST}", ImageRef("named", "python", "3.11", DIGEST)),
        ("/shared/images/torch", ImageRef("layout", "/shared/images/torch")),
        ("/shared/images/torch.tar", ImageRef("archive", "/shared/images/torch.tar")),
        ("oci:/shared/layout:v2", ImageRef("layout", "/shared/layout", "v2")),
        ("oci-archive:/shared/x.tar", ImageRef("archive", "/shared/x.tar")),
        ("oci-archive:/shared/x.tar:latest", ImageRef("archive", "/shared/x.tar", "latest")),
    ],
)
def test_each_form_is_read(text: str, read: ImageRef) -> None:
    assert parse_ref(text) == read


def test_a_registry_host_is_told_from_an_imported_name() -> None:
    assert parse_ref("nvcr.io/nvidia/pytorch:24.10").is_registry_like
    assert parse_ref("localhost:5000/x").is_registry_like
    assert not parse_ref("team/stack").is_registry_like  # an imported name, else Docker Hub's team/stack
    assert not parse_ref("/shared/x").is_registry_like


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "must not be empty"),
        ("Python:3.11", "not an image reference"),  # upper case in a repository
        ("python 3.11", "space"),
        ("python:3.11\n", "control character"),
        ("a" * (MAX_REF + 1), f"at most {MAX_REF}"),
        ("oci:relative/dir", "absolute path"),
        ("oci:/shared/../etc:v1", "'..'"),
        ("/shared/../etc/x.tar", "'..'"),
        ("oci:/x:bad tag", "space"),
        ("oci:/x:-bad", "invalid tag"),
        ("python@sha256:short", "not an image reference"),
        ("python:3.11:extra", "not an image reference"),
    ],
)
def test_what_is_not_a_reference_is_refused_with_why(text: str, says: str) -> None:
    with pytest.raises(BadImageRef, match=says.replace("(", r"\(")):
        parse_ref(text)


def test_a_job_with_an_image_may_leave_the_command_to_the_image() -> None:
    spec = JobSpec.create(command=[], image="nvcr.io/nvidia/pytorch:24.10-py3")
    assert spec.command == () and spec.image == "nvcr.io/nvidia/pytorch:24.10-py3"
    assert spec.name == "pytorch"  # named after the image, as a job is after its program
    assert JobSpec.create(command=["python", "train.py"], image="python:3.11").name == "train.py"
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.submission()["image"] == spec.image and spec.submission()["command"] == []


def test_without_an_image_the_command_is_still_needed_and_a_bad_image_is_refused() -> None:
    with pytest.raises(InvalidInput, match="empty command"):
        JobSpec.create(command=[])
    with pytest.raises(InvalidInput, match=r"^--image: .*not an image reference"):
        JobSpec.create(command=["x"], image="Not_An_Image")


def test_a_spec_stored_before_images_still_loads() -> None:
    data = JobSpec.create(command=["x"]).to_dict()
    del data["image"]
    assert JobSpec.from_dict(data).image is None

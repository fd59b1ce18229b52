"""Registry logins' words (issue 32): which registry an image is pulled from, the host forms a
login accepts, and the bounds of a user name and secret."""

from __future__ import annotations

import base64

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.launch import RegistryAuth
from gpupool.domain.registries import check_login, registry_host, registry_of


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("nvcr.io/nvidia/pytorch:24.10-py3", "nvcr.io"),
        ("registry.lab:5000/team/img@sha256:" + "a" * 64, "registry.lab:5000"),
        ("localhost/img", "localhost"),
        ("python:3.11", "docker.io"),  # a name without a host is Docker Hub's
        ("library/python", "docker.io"),
        ("index.docker.io/library/python", "docker.io"),
        ("/shared/img.tar", None),  # paths are never pulled
        ("oci:/shared/layout:v1", None),
        (None, None),
        ("NOT A REF", None),
    ],
)
def test_the_registry_an_image_is_pulled_from(image: str | None, registry: str | None) -> None:
    assert registry_of(image) == registry


@pytest.mark.parametrize(
    ("text", "host"),
    [
        ("nvcr.io", "nvcr.io"),
        (" NVCR.IO/ ", "nvcr.io"),
        ("registry-1.docker.io", "docker.io"),
        ("[::1]:5000", "[::1]:5000"),
    ],
)
def test_registry_hosts_are_read_as_docker_reads_them(text: str, host: str) -> None:
    assert registry_host(text) == host


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("https://nvcr.io", "without a scheme"),
        ("nvcr.io/nvidia", "is not a registry host"),
        ("", "is not a registry host"),
        ("-bad.io", "is not a registry host"),
        ("a" * 254, "is not a registry host"),
    ],
)
def test_anything_else_is_not_a_registry(text: str, said: str) -> None:
    with pytest.raises(InvalidInput, match=said):
        registry_host(text)


@pytest.mark.parametrize(
    ("username", "secret", "said"),
    [
        ("", "p", "user name"),
        ("a:b", "p", "without ':'"),
        ("a\tb", "p", "printable"),
        ("u" * 257, "p", "user name"),
        ("u", "", "password"),
        ("u", "a\nb", "on one line"),
        ("u", "x" * 16385, "16384"),
    ],
)
def test_login_bounds(username: str, secret: str, said: str) -> None:
    with pytest.raises(InvalidInput, match=said):
        check_login(username, secret)
    check_login("$oauthtoken", "nvapi-" + "x" * 4000)  # NGC's user name and a long key are fine


def test_the_secret_never_shows_in_a_repr_and_its_auth_entry_is_dockers() -> None:
    auth = RegistryAuth("alice", "nvcr.io", "$oauthtoken", "nvapi-secret")
    assert "nvapi-secret" not in repr(auth)
    entry = auth.auth_entry()
    assert list(entry) == ["nvcr.io"]
    assert base64.b64decode(entry["nvcr.io"]["auth"]).decode() == "$oauthtoken:nvapi-secret"

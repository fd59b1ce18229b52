"""Traffic can be encrypted (issue 15, part 6): a head serving HTTPS with a certificate the test
makes, clients that verify it (--ca) and refuse one they cannot verify, and a URL check that reads
the URL, so a token never goes in clear text beyond this machine unless the caller says so."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpupool.client.http import GpupoolClient, HeadUnreachable, check_url
from gpupool.domain.errors import InvalidInput
from tests.support.headproc import HeadProcess

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:7070", "http://localhost:7070/", "http://[::1]:7070", "http://127.8.9.10", "https://a.example"],
)
def test_urls_that_keep_the_token_safe_are_taken(url: str) -> None:
    assert check_url(url) == url.rstrip("/")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://10.1.2.3:7070", "refusing to send a token in clear text to 10.1.2.3"),
        ("http://127.0.0.1.evil.example:7070", "in clear text to 127.0.0.1.evil.example"),  # not by prefix
        ("http://localhost@evil.example/", "in clear text to evil.example"),
        ("ftp://127.0.0.1", "malformed head URL"),
        ("http://127.0.0.1:port", "malformed head URL"),
        ("127.0.0.1:7070", "malformed head URL"),
    ],
)
def test_urls_that_would_leak_the_token_or_make_no_sense_are_refused(url: str, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        check_url(url)
    if "clear text" in says:
        assert check_url(url, insecure=True)  # told so


def test_the_head_serves_https_and_clients_verify_it(head_factory: type[HeadProcess], tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    make = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    extension = ["-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run([*make, *extension, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    head = head_factory(extra=["--tls-cert", str(cert), "--tls-key", str(key)]).start()
    url = f"https://127.0.0.1:{head.port}"
    assert head.ready_line.startswith(f"gpupool head ready at {url}")
    with GpupoolClient(url, head.token(), ca=str(cert)) as c:
        assert c.health()["status"] == "ok"
        assert c.submit(command=["true"], gpus=0)["state"] == "pending"
    with GpupoolClient(url, head.token()) as c, pytest.raises(HeadUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
        c.health()  # a certificate the system does not trust is refused
    listed = head.cli("--ca", str(cert), "jobs", "--url", url)
    assert listed.returncode == 0, listed.stderr
    plain = head.cli("jobs", "--url", f"http://127.0.0.1:{head.port}")
    assert plain.returncode != 0  # plain http to the TLS port gets no answer
    half = head.cli("up", "--tls-cert", str(cert), "--port", "0", "--data-dir", str(tmp_path / "other"))
    assert half.returncode == 2 and "--tls-cert and --tls-key go together" in half.stderr

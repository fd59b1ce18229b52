"""Submitting twice makes one job (issue 15, part 2), on a real head: the same Idempotency-Key
within 24 hours returns the first job, also to concurrent requests and to a client whose first
answer was lost on the way back; the same key for another request is refused."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from gpupool.client.http import GpupoolClient
from tests.support.headproc import HeadProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def head(shared_head: HeadProcess) -> HeadProcess:
    return shared_head


def _post(head: HeadProcess, body: dict[str, Any], key: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token or head.token()}", "Idempotency-Key": key}
    return httpx.post(f"{head.url}/api/v1/jobs", json=body, headers=headers, timeout=30)


def _count(head: HeadProcess, name: str) -> int:
    with head.client() as c:
        return sum(1 for j in c.jobs(include_finished=True) if j["name"] == name)


def test_the_same_key_returns_the_first_job_and_another_request_with_it_is_refused(head: HeadProcess) -> None:
    body = {"command": ["sleep", "1"], "gpus": 0, "name": "idem-once"}
    first, again = _post(head, body, "key-1"), _post(head, body, "key-1")
    assert first.status_code == again.status_code == 201, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert _count(head, "idem-once") == 1

    other = _post(head, {**body, "gpus": 1}, "key-1")
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused", other.text
    assert f"job {first.json()['id']}" in other.json()["message"]

    for bad in ("", "x" * 256, "has space", "tab\there"):
        refused = _post(head, body, bad)
        assert refused.status_code in (400, 422), (bad, refused.text)


def test_concurrent_requests_with_one_key_make_one_job(head: HeadProcess) -> None:
    body = {"command": ["sleep", "1"], "gpus": 0, "name": "idem-race"}
    ids: list[int] = []
    barrier = threading.Barrier(8)

    def send() -> None:
        barrier.wait()
        response = _post(head, body, "race-key")
        assert response.status_code == 201, response.text
        ids.append(int(response.json()["id"]))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 8 and len(set(ids)) == 1, ids
    assert _count(head, "idem-race") == 1


class _LoseFirstAnswer(httpx.HTTPTransport):
    """Sends every request; the answer to the first submission is lost on the way back."""

    def __init__(self) -> None:
        super().__init__()
        self.submissions = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path == "/api/v1/jobs":
            self.submissions += 1
            if self.submissions == 1:
                response.close()
                raise httpx.ReadError("connection reset by peer", request=request)
        return response


def test_the_client_retries_a_lost_answer_and_the_cli_takes_a_key(head: HeadProcess) -> None:
    lossy = _LoseFirstAnswer()
    with GpupoolClient(head.url, head.token(), transport=lossy) as c:
        job = c.submit(command=["sleep", "1"], gpus=0, name="idem-lost")
    assert lossy.submissions == 2  # sent twice, made once
    assert _count(head, "idem-lost") == 1 and job["name"] == "idem-lost"

    ids = [
        head.cli(
            "submit", "--gpus", "0", "--name", "idem-cli", "--idempotency-key", "cli-k", "--", "true"
        ).stdout.split()[-1]
        for _ in range(2)
    ]
    assert ids[0] == ids[1] and ids[0].isdigit(), ids
    assert _count(head, "idem-cli") == 1
    with head.client() as c:  # without a key of its own, each call is a new job
        assert (
            c.submit(command=["true"], gpus=0, name="idem-new")["id"]
            != c.submit(command=["true"], gpus=0, name="idem-new")["id"]
        )


def test_keys_are_per_user(head: HeadProcess, unix_accounts: Any) -> None:
    with head.client() as admin:
        token = str(admin.add_user("idem-ida", unix_user=unix_accounts.make("ida"))["token"])
    body = {"command": ["true"], "gpus": 0, "name": "idem-users"}
    mine, theirs = _post(head, body, "shared-key"), _post(head, body, "shared-key", token=token)
    assert mine.status_code == theirs.status_code == 201, theirs.text
    assert mine.json()["id"] != theirs.json()["id"] and theirs.json()["owner"] == "idem-ida"

"""The API under generated input (issue 15, part 7): schemathesis sends requests built from the
head's own OpenAPI document to every operation, as a member and as an admin, and every answer must
be no server error and match the document (status, content type, body schema). The number of
requests is printed; a failure names the operation and a curl command that reproduces it.

The member's jobs run as an unprivileged test account; the admin fuzzes everything but POST /jobs
and POST /services, so no generated command ever runs as root."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.headproc import HeadProcess
from tests.support.unix_accounts import TestAccounts

schemathesis = pytest.importorskip(
    "schemathesis", reason="the API fuzzing needs schemathesis: pip install -e '.[test]'"
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.e2e

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 12  # per operation and caller: about 1,000 requests in all


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    # Generated requests revoke tokens and disable users as they go: the failed sign-ins that follow
    # are not what is tested here (tests/api/test_audit.py is).
    made = HeadProcess(
        tmp_path_factory.mktemp("fuzz") / "data", gpus=1, gateway=True, extra=["--sign-in-limit", "0"]
    ).start()
    yield made
    made.kill_everything()


def _fuzz(head: HeadProcess, token: str, skip: set[tuple[str, str]]) -> tuple[int, list[str]]:
    schema = schemathesis.openapi.from_url(f"{head.url}/openapi.json")
    sent, failures = 0, []
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) in skip:
            continue

        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(operation.as_strategy())
        def call(case: Any) -> None:
            nonlocal sent
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {token}"}
            response = case.call(timeout=30)
            sent += 1
            case.validate_response(response, checks=CHECKS)

        try:
            call()
        except Exception as exc:  # a check failed: keep going, report every operation that did
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:600]}")
    return sent, failures


def test_no_generated_request_gets_a_server_error_or_an_answer_off_the_schema(
    head: HeadProcess, unix_accounts: TestAccounts
) -> None:
    with head.client() as admin:
        member = str(admin.add_user("fuzz-member", unix_user=unix_accounts.make("fuzz"))["token"])
    sent_member, member_failures = _fuzz(head, member, skip=set())
    # POST /services starts replica jobs of whatever command was generated, as POST /jobs would.
    sent_admin, admin_failures = _fuzz(
        head, head.token(), skip={("POST", "/api/v1/jobs"), ("POST", "/api/v1/services")}
    )
    # The gateway's own identity: its two routes (routes out, load in), and a refusal everywhere else.
    gateway = (head.data_dir / "gateway-token").read_text().strip()
    sent_gateway, gateway_failures = _fuzz(head, gateway, skip=set())
    print(f"\nAPI fuzzing: {sent_member} requests as a member, {sent_admin} as an admin, {sent_gateway} as the gateway")
    assert sent_member > 300 and sent_admin > 300 and sent_gateway > 300
    failures = member_failures + admin_failures + gateway_failures
    assert failures == [], "\n\n".join(failures)

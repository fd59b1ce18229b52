"""``POST /api/v1/jobs`` and ``POST /api/v1/arrays`` as plain ASGI routes, in front of FastAPI's
routing and dependency solving.

At 1,000 submissions a second the event loop's share of a submission was ~0.55 ms, a third of it
FastAPI matching the route and solving its dependencies (the context, the caller and its bearer
scheme, the group commit, the body, the ``Idempotency-Key`` header) for the one request that
scripts send by the thousand. An array is accepted as one record (issue 36), and there the
thread hop of a plain route and an audit entry in a transaction of its own were most of its wait.
This route does the same for a good submission, in a straight line:
the same token look-up (``deps.authenticate``) and permission-table rule, the same body model
(``SubmitRequest``, ``ArraySubmitRequest``) and header limits, the same ``submit_async`` (or
``submit_array_async``) with its audit entry, the same answer bytes (``JobOut`` or ``ArrayOut``
through pydantic's serializer, as FastAPI sends it) and headers.

Anything else (no token or one that fails, a refusal by the permission table, a body that is not
a JSON object of ``application/json``, a field out of its range, a key out of its pattern, a spec
``JobSpec.create`` or indices ``ArraySpec.parse`` refuse) falls through to FastAPI with the body
handed on unread, so every error a client can get before its submission is queued is FastAPI's
own, word for word; nothing has been changed by then. After it is queued, a refusal
(``GpupoolError``) is answered with the API's ``{code, message}`` as FastAPI's handler would
(``errors.error_response``).

It sits inside the door, the sign-in throttle and the audit middleware (``app.py``): those treat
it as any route. It names the FastAPI route it stands in for in the request's scope (``route``,
``endpoint``, ``path_params``), as FastAPI's router would, so the audit entry is the same.
``tests/api/test_fast_submit.py`` runs the same good and bad submissions through both and
compares status, headers and body.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.api import auditing
from gpupool.api.deps import authenticate
from gpupool.api.errors import error_response
from gpupool.api.params import MAX_IDEMPOTENCY_KEY
from gpupool.api.permissions import rule_for
from gpupool.api.schemas.arrays import ArrayOut, ArraySubmitRequest
from gpupool.api.schemas.jobs import JobOut, SubmitRequest
from gpupool.domain.arrays import ArraySpec
from gpupool.domain.errors import GpupoolError
from gpupool.domain.jobs import JobSpec
from gpupool.domain.permissions import refusal
from gpupool.store.tokens import Principal
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit
from gpupool.usecases.submission import Array, Job

JOBS, ARRAYS = "/api/v1/jobs", "/api/v1/arrays"
_JSON = b"application/json"


class FastSubmit:
    def __init__(self, app: ASGIApp, routes: dict[str, APIRoute], ctx: HeadContext, group: GroupCommit) -> None:
        """``routes``: the FastAPI route each path stands in for (``JOBS``, ``ARRAYS``)."""
        self.app, self.routes, self.ctx, self.group = app, routes, ctx, group
        self.rules = {path: rule_for("POST", route.path_format) for path, route in routes.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        messages, body = await _read(receive)
        submission = self._spec(scope, body) if body is not None else None
        if submission is None:  # not a good submission: FastAPI says why, with the body as it came
            await self.app(scope, _replay(messages, receive), send)
            return
        what, who, key = submission
        scope.update(route=route, endpoint=route.endpoint, path_params={})  # as FastAPI's router
        noted = auditing.in_transaction(scope)
        try:
            if isinstance(what, Array):
                array, replayed = await self.group.submit_array_async(what.spec, what.array, who, key, noted)
                content = ArrayOut.__pydantic_serializer__.to_json(ArrayOut.of(array), by_alias=True)
                location = f"{ARRAYS}/{array.first.id}"
            else:
                job, replayed = await self.group.submit_async(what.spec, who, key, noted)
                content = JobOut.__pydantic_serializer__.to_json(JobOut.of(job), by_alias=True)
                location = f"{JOBS}/{job.id}"
        except GpupoolError as exc:
            await error_response(exc.status, exc.code, exc.message)(scope, receive, send)
            return
        auditing.written(scope, noted)
        headers = [
            (b"content-length", str(len(content)).encode()),
            (b"content-type", _JSON),
            (b"location", location.encode()),
        ]
        if replayed:
            headers.append((b"idempotent-replayed", b"true"))
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def _spec(self, scope: Scope, body: bytes) -> tuple[Job | Array, Principal, str | None] | None:
        """The job (or array), its submitter and its key, if FastAPI's route would get as far as
        submitting it; else None (FastAPI answers)."""
        authorization = content_type = key = None
        for name, value in scope["headers"]:  # the first of each, as FastAPI reads them
            if name == b"authorization" and authorization is None:
                authorization = value
            elif name == b"content-type" and content_type is None:
                content_type = value
            elif name == b"idempotency-key" and key is None:
                key = value
        if content_type is None or content_type.partition(b";")[0].strip().lower() != _JSON or not body:
            return None
        if authorization is None or (key is not None and not _good_key(key)):
            return None
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        try:
            who = authenticate(self.ctx, token)  # the door checked it: from the cache
            if who is None or refusal(self.rules[scope["path"]], who.role, who.scope) is not None:
                return None
            fields: Any = json.loads(body)
            if not isinstance(fields, dict):
                return None
            what = _request(scope["path"], fields)
        except (ValueError, ValidationError, GpupoolError):
            return None  # FastAPI's answer and audit entry: the request's state is as it came
        scope.setdefault("state", {})["principal"] = who  # for the audit log, as deps.principal
        return what, who, None if key is None else key.decode("ascii")


def _request(path: str, fields: dict[str, Any]) -> Job | Array:
    """What the route's body asks for, checked as its FastAPI route checks it."""
    if path == ARRAYS:
        asked = ArraySubmitRequest.model_validate(fields)
        array = ArraySpec.parse(asked.array)
        return Array(JobSpec.create(**asked.model_dump(exclude={"array"})), array)
    return Job(JobSpec.create(**SubmitRequest.model_validate(fields).model_dump()))


def _good_key(key: bytes) -> bool:
    return 0 < len(key) <= MAX_IDEMPOTENCY_KEY and all(0x21 <= c <= 0x7E for c in key)


async def _read(receive: Receive) -> tuple[list[Message], bytes | None]:
    """The request's messages as received, and its body; None if the client left first."""
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        if not message.get("more_body", False):
            return messages, b"".join(m.get("body", b"") for m in messages)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that first gives back what was already read."""
    pending = list(messages)

    async def again() -> Message:
        return pending.pop(0) if pending else await receive()

    return again

"""The one place errors become HTTP: ``{"code": ..., "message": ...}`` with a 4xx/5xx status."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpupool.domain.errors import GpupoolError

log = logging.getLogger("gpupool.api")


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status)


def install(app: FastAPI) -> None:
    @app.exception_handler(GpupoolError)
    async def on_gpupool(_request: Request, exc: GpupoolError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def on_validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(400, "malformed_json", "the request body is not valid JSON")
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
        return error_response(422, "invalid_argument", f"{where}: {first.get('msg', 'invalid value')}")

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def on_crash(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, "internal", f"internal error ({type(exc).__name__}); see the head's log")


# Every error status the head answers, documented on every operation with the one error shape, so
# that a client (and the API fuzzing in tests/e2e/test_api_fuzz.py) can check each answer against
# the schema. 422 replaces FastAPI's own validation shape, which the head never sends.
ERROR_STATUSES = {
    "400": "bad input: a value out of its range, malformed JSON",
    "401": "no token, or one that does not work",
    "403": "the token's user may not do this",
    "404": "no such job, node, project, user or token",
    "405": "method not allowed",
    "408": "the request body came too slowly (--client-timeout)",
    "409": "the thing changed or is in use: try again, or see the message",
    "413": "the request body is larger than --max-body",
    "422": "a value of the wrong type, or a request no node could ever run",
    "429": "too many failed sign-ins from this address: wait as Retry-After says, with a token that works",
    "503": "the head or its database cannot serve this now",
}
_ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "string", "description": "stable, for scripts"},
        "message": {"type": "string", "description": "one line, for people"},
    },
}


def document(app: FastAPI) -> None:
    """Put the error shape on every operation of the app's OpenAPI document."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = _ERROR_SCHEMA
            error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    responses = operation.setdefault("responses", {})
                    for status, meaning in ERROR_STATUSES.items():
                        responses[status] = {"description": meaning, **error}
            schema["components"]["schemas"].pop("HTTPValidationError", None)
            schema["components"]["schemas"].pop("ValidationError", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

"""Path and query parameters shared by several routes, with their documented ranges: FastAPI
refuses what falls outside with a 422 ``{code, message}`` before any route runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Path, Query

from gpupool.domain import bounds

JobId = Annotated[int, Path(ge=1, le=bounds.MAX_ID, description="a job id")]
TokenId = Annotated[int, Path(ge=1, le=bounds.MAX_ID, description="a token id")]
WorkerIndex = Annotated[int, Query(ge=0, le=4095, description="which worker of the job (0 is the first)")]
LogOffset = Annotated[int, Query(ge=0, le=bounds.MAX_LOG_OFFSET, description="a byte offset into the log")]
MAX_IDEMPOTENCY_KEY = 255  # characters; api/fast_submit.py checks the same bound
IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=MAX_IDEMPOTENCY_KEY,
        pattern=r"^[\x21-\x7e]+$",
        description="any printable ASCII up to 255 characters, e.g. a UUID: the same key within 24 hours"
        " returns the job the first request made",
    ),
]

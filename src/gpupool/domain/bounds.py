"""The documented range of every number and the shape of every string the head accepts.

Checked at the edge, in the domain (so the CLI, the API and the client share them), each breach a
one-line ``InvalidInput``: a number past what the database column or the clock can hold must be a
400, never an ``OverflowError`` and a 500 after half a request was done. Strings people read (names,
models) carry no control or bidirectional-override characters, which could make ``gpupool jobs``
show one thing and hold another.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence

from gpupool.domain.errors import InvalidInput

MAX_ID = 2**63 - 1  # a job id, token id: what a BIGINT column holds
MAX_GPUS_PER_WORKER = 1024
MAX_GPU_INDEX = MAX_GPUS_PER_WORKER - 1  # a GPU's index on its node
MAX_LISTING = 100_000  # the most rows one listing returns
MAX_CPUS_PER_WORKER = 4096
MAX_MEMORY_MIB = 2**30  # 1 PiB per worker
MAX_RESTARTS = 1000
MAX_RUNTIME_S = 366 * 86400  # a year (and a day)
MAX_ARGS = 4096
MAX_COMMAND_BYTES = 128 * 1024  # all arguments together
MAX_ENV_VARS = 1024
MAX_ENV_BYTES = 128 * 1024  # every name and value together
MAX_PATH = 4096  # PATH_MAX
MAX_MODEL = 64
MAX_LOG_OFFSET = 2**44  # 16 TiB: past any log a worker can write


def whole(what: str, value: object, low: int, high: int) -> int:
    """A whole number within [low, high] (not a bool, not a float)."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{what} must be a whole number from {low} to {high}, got {shown(value)}")
    return value


def readable(what: str, value: str, longest: int) -> str:
    """Text people read in listings: at most ``longest`` characters, no control or format
    characters (bidirectional overrides, zero-width characters)."""
    if len(value) > longest:
        raise InvalidInput(f"{what} is longer than {longest} characters")
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf")), None)
    if bad is not None:
        raise InvalidInput(f"{what} must not contain control or formatting characters (found U+{ord(bad):04X})")
    return value


def path(what: str, value: str | None) -> str | None:
    if value is None:
        return None
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL bytes")
    if len(value.encode()) > MAX_PATH:
        raise InvalidInput(f"{what} is longer than {MAX_PATH} bytes")
    return value


def command(argv: Sequence[str]) -> None:
    if len(argv) > MAX_ARGS:
        raise InvalidInput(f"the command has {len(argv)} arguments; at most {MAX_ARGS}")
    if any("\x00" in a for a in argv):
        raise InvalidInput("command arguments must not contain NUL bytes")
    if sum(len(a.encode()) + 1 for a in argv) > MAX_COMMAND_BYTES:
        raise InvalidInput(f"the command is longer than {MAX_COMMAND_BYTES // 1024} KiB")


def environment(env: Mapping[str, str]) -> None:
    """What ``execve`` will accept, checked before the job is queued rather than at its launch."""
    if len(env) > MAX_ENV_VARS:
        raise InvalidInput(f"{len(env)} environment variables; at most {MAX_ENV_VARS}")
    for key, value in env.items():
        if not isinstance(value, str):
            raise InvalidInput(f"environment variable {key} must be a string")
        if "\x00" in value:
            raise InvalidInput(f"environment variable {key} must not contain NUL bytes")
    if sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items()) > MAX_ENV_BYTES:
        raise InvalidInput(f"the environment is larger than {MAX_ENV_BYTES // 1024} KiB in all")


def shown(value: object) -> str:
    """A value as an error message quotes it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."

"""Every setting of the head, declared once: its name (the flag ``--NAME``, the environment variable ``GPUPOOL_NAME``),
the command line's type and default, its bounds, its help, and how what was typed is read into the value ``Settings``
holds. ``gpupool up``'s options (cli/up.py), ``Settings``' fields and defaults (settings.py) and the environment are
derived from this table, and tests/cli/test_knobs.py fails when they disagree or a knob is declared twice.

A new head setting: a row here, the field in ``Settings`` with the row's default, and its use where the head hands
settings to their consumer (head.py, ``Settings``' properties).

Light on purpose: every CLI command imports it; the scheduler only where a knob needs it (``gpupool up``'s policy).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from gpupool.domain.arrays import DEFAULT_MAX_USER_ARRAYS
from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.option_text import bounded_duration, bounded_size, networks
from gpupool.domain.power import read_budget
from gpupool.domain.resources import format_bytes
from gpupool.domain.user_logs import DEFAULT_MAX_USER_LOG_BYTES

T = TypeVar("T")
ENV_PREFIX = "GPUPOOL_"
DEFAULT_PORT = 7070
DEFAULT_GATEWAY_PORT = 7071


class Backend(enum.StrEnum):
    LOCAL = "local"
    RAY = "ray"


@dataclass(frozen=True, slots=True)
class Knob(Generic[T]):
    """One setting. ``option`` and ``given`` are the command line's type and default (``str``, ``"10s"``); ``read``
    turns what the command line gave into the setting (``10.0`` seconds), refusing bad values with a one-line
    ``InvalidInput``. ``low``/``high`` bound the value: checked by the command line itself for a number option (its
    message, its ``[0<=x<=65535]`` in --help), by ``read`` for text (a duration, a size)."""

    name: str  # snake case, as the option's parameter
    option: Any  # a type expression: int, str, Path | None, list[str] | None, Backend
    given: Any
    read: Callable[[Knob[T], Any], T]
    help: str | Callable[[], str]  # a callable where the text needs a heavy import (said only by --help)
    field: str = ""  # the Settings field it sets ("" : the name)
    low: float | None = None
    high: float | None = None
    flags: tuple[str, ...] = ()  # the option's spellings when not --name (--cgroups/--no-cgroups)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def envvar(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def setting(self) -> str:
        return self.field or self.name

    @property
    def help_text(self) -> str:
        return self.help if isinstance(self.help, str) else self.help()

    @property
    def bounded_by_option(self) -> bool:
        """A number option: the command line checks ``low``/``high`` (min/max) before ``read``."""
        return self.option in (int, float)

    @property
    def default(self) -> T:
        """The setting when the option is not given: ``given`` read as a given value would be."""
        return self.read(self, self.given)


def _as_given(_knob: Knob[Any], given: Any) -> Any:
    return given


def _duration(knob: Knob[float], text: str) -> float:
    if knob.low is None or knob.high is None:
        return parse_duration(text)
    return bounded_duration(knob.flag, text, knob.low, knob.high)


def _size(knob: Knob[int], text: str) -> int:
    assert knob.low is not None and knob.high is not None
    return bounded_size(knob.flag, text, int(knob.low), int(knob.high))


def _networks(knob: Knob[tuple[str, ...]], given: list[str] | None) -> tuple[str, ...]:
    return networks(knob.flag, given or [])


def _user_path(_knob: Knob[Path | None], given: Path | None) -> Path | None:
    """A path typed or set in the environment; ``~`` is the user's home, as in GPUPOOL_DATA_DIR."""
    return None if given is None else given.expanduser()


def _readable(knob: Knob[Path | None], path: Path | None) -> Path | None:
    """A file read now (a TLS certificate or key), not at the first client."""
    if path is None:
        return None
    try:
        path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {knob.flag} {path}: {exc.strerror}") from None
    return path.resolve()


def _choice(_knob: Knob[str], member: enum.Enum) -> str:
    return str(member.value)


def whole(name: str, given: int, help: str, *, low: int | None = None, high: int | None = None) -> Knob[int]:
    return Knob(name, int, given, _as_given, help, low=low, high=high)


def number(
    name: str, given: float, help: str, *, field: str, low: float | None = None, high: float | None = None
) -> Knob[float]:
    return Knob(name, float, given, _as_given, help, field, low, high)


def text(name: str, given: str, help: str | Callable[[], str]) -> Knob[str]:
    return Knob(name, str, given, _as_given, help)


def maybe_text(name: str, help: str, *, field: str = "") -> Knob[str | None]:
    return Knob(name, str | None, None, _as_given, help, field)


def maybe_whole(name: str, help: str) -> Knob[int | None]:
    return Knob(name, int | None, None, _as_given, help)


def maybe_path(
    name: str, help: str, read: Callable[[Knob[Path | None], Path | None], Path | None] = _user_path
) -> Knob[Path | None]:
    return Knob(name, Path | None, None, read, help)


def switch(name: str, given: bool, help: str, *flags: str) -> Knob[bool]:
    return Knob(name, bool, given, _as_given, help, flags=flags)


def duration(name: str, given: str, help: str, low: float | None = None, high: float | None = None) -> Knob[float]:
    """A duration typed as ``90s``, ``10m``, ``1d``: the setting is seconds, field ``NAME_s``."""
    return Knob(name, str, given, _duration, help, f"{name}_s", low, high)


def size(name: str, given: str, help: str, low: int, high: int, *, field: str) -> Knob[int]:
    """A size typed as ``512K``, ``100M``, ``1G``: the setting is bytes."""
    return Knob(name, str, given, _size, help, field, low, high)


def _policy_help() -> str:
    from gpupool.scheduler.policies import POLICIES, SIM_ONLY

    return f"scheduling policy: {', '.join(n for n in POLICIES if n not in SIM_ONLY)}"


MIB, TIB, DAY = 2**20, 2**40, 86400
_SLOWDOWN_HELP = "--gpu-power efficient: the least energy per unit of work at most this % slower than max (0 to 90)"

PORT = whole("port", DEFAULT_PORT, "API port (0: any free port)", low=0, high=65535)
HOST = text("host", "127.0.0.1", "address to listen on")
DATA_DIR = maybe_path(
    "data_dir", "state, logs and the admin token [default: $GPUPOOL_DATA_DIR or $XDG_DATA_HOME/gpupool]"
)
DB = maybe_text("db", "SQLAlchemy URL [default: SQLite in the data dir]", field="db_url")
FAKE_NODES = maybe_whole("fake_nodes", "simulate this many nodes")
FAKE_GPUS = maybe_whole("fake_gpus", "simulated GPUs per node")
FAKE_GPU_MODEL = maybe_text("fake_gpu_model", "model name of the simulated GPUs")
FAKE_HARDWARE = maybe_path("fake_hardware", "simulate the nodes and GPUs a JSON file describes")
KILL_GRACE = number("kill_grace", 10.0, "seconds between SIGTERM and SIGKILL", field="kill_grace_s", low=0)
FAIR_SHARE_HALF_LIFE = duration(
    "fair_share_half_life", "1d", "how long past usage counts for fair share: its weight halves every this long"
)
PLACEMENT = text("placement", "frag", "placement plugin: frag (fragmentation-aware), binpack, spread or topology")
POLICY = text("policy", "default", _policy_help)
PARTITION = maybe_text(
    "partition", "fifo-isolated confines a project to: nodes (its own, sized by its quota; the default) or gpus"
)
INTERVAL = number("interval", 0.5, "seconds between controller cycles", field="interval_s", low=0.01, high=60)
_MIN_RUN_HELP = "a job that borrowed beyond its quota runs this long before reclaim stops it (0 to 1d)"
RECLAIM_MIN_RUN = duration("reclaim_min_run", "0s", _MIN_RUN_HELP, 0, DAY)  # bound: MAX_RECLAIM_MIN_RUN_S (test_knobs)
MAX_WAIT = duration(  # the bound is the scheduler's MAX_WAIT_BOUND_S (test_knobs checks)
    "max_wait", "0s", "a job that waited this long goes first, the oldest first (0 to 30d; 0: off)", 0, 30 * DAY
)
_FAIR_HELP = "reclaim also takes checkpointed jobs back from projects above their fair share for those below it"
FAIR_RECLAIM = switch("fair_reclaim", False, _FAIR_HELP + " that wait, after --reclaim-min-run", "--fair-reclaim")
BACKEND: Knob[str] = Knob(
    "backend", Backend, Backend.LOCAL, _choice, "local: virtual nodes on this machine; ray: every node of a Ray cluster"
)
RAY_ADDRESS = maybe_text(
    "ray_address", "Ray backend: join this Ray cluster (token from RAY_AUTH_TOKEN_PATH) instead of starting one"
)
NODE_NAME = maybe_text("node_name", "Ray backend: this machine's node name [default: hostname]")
NODE_TIMEOUT = duration(
    "node_timeout", "10s", "Ray backend: a node silent this long is declared down and its jobs requeued", 2, 3600
)
TELEMETRY_EVERY = duration("telemetry_every", "5s", "read every GPU this often (1s to 5m)", 1, 300)
IDLE_THRESHOLD = number(
    "idle_threshold",
    5.0,
    "an allocated GPU below this utilisation (%) counts towards idle",
    field="idle_threshold_pct",
    low=0,
    high=100,
)
IDLE_AFTER = duration(
    "idle_after", "10m", "an allocated GPU below the idle threshold this long is reported idle", 10, 7 * DAY
)
ALERT_TEMPERATURE = number(
    "alert_temperature",
    85.0,
    "raise an alert when a GPU reaches this temperature (°C)",
    field="alert_temperature_c",
    low=30,
    high=150,
)
CGROUPS = switch(
    "cgroups",
    True,
    "each worker in a cgroup of its own where the node can make them (root, a cgroup fs);"
    " --no-cgroups keeps only per-process limits (gpupool nodes says so)",
    "--cgroups/--no-cgroups",
)
ALLOW_SYSTEM_ACCOUNTS = switch(
    "allow_system_accounts",
    False,
    "let users' jobs run as root or an account below UID_MIN (refused by default, at mapping,"
    " submit and launch); the built-in admin's jobs run as the head's account either way",
    "--allow-system-accounts",
)
RESTART_BACKOFF = duration(
    "restart_backoff",
    "10s",
    "a job that failed waits this long before its next attempt, doubling with each failure up to"
    " 5m (0 to 10m; 0: at once)",
    0,
    600,
)
KEEP_FINISHED = duration(
    "keep_finished",
    "30d",
    "finished jobs, with their events, run directories and logs, are deleted after this long (1h to 10y)",
    3600,
    3650 * DAY,
)
MAX_LOG_SIZE = size(
    "max_log_size", "100M", "a worker's log past this keeps its newest half (1M to 1T)", MIB, TIB, field="max_log_bytes"
)
MAX_USER_ARRAYS = whole(
    "max_user_arrays",
    DEFAULT_MAX_USER_ARRAYS,
    "arrays with an unfinished task one user may have; another array is refused (409 too_many_arrays)"
    " until one finishes (1 to 100000)",
    low=1,
    high=100_000,
)
MAX_USER_LOGS = size(
    "max_user_logs",
    format_bytes(DEFAULT_MAX_USER_LOG_BYTES),
    "each user's logs together, on every node; past it the logs of their oldest finished jobs are"
    " emptied first, said in those jobs' events (1M to 1T)",
    MIB,
    TIB,
    field="max_user_log_bytes",
)
IMAGE_CACHE = size(
    "image_cache",
    "200G",
    "each node's cache of unpacked job images (--image); past it the least recently used image no job"
    " runs in is removed first (1G to 100T)",
    1024 * MIB,
    100 * TIB,
    field="image_cache_bytes",
)
IMAGE_WAIT = duration(
    "image_wait",
    "1h",
    "a job whose --image no node can get now (a path not there, a registry not answering) is tried"
    " again each minute for this long, then fails with exit_reason image (0 to 7d; 0: it fails at"
    " once): a registry down for minutes fails no job, a mistyped path fails within the hour",
    0,
    7 * DAY,
)
MAX_BODY = size(
    "max_body", "1M", "the largest request body the API reads (1K to 64M)", 1024, 64 * MIB, field="max_body_bytes"
)
CLIENT_TIMEOUT = duration(
    "client_timeout",
    "10s",
    "how long a client may take to send a request's headers, and then its body (1s to 5m)",
    1,
    300,
)
TLS_CERT = maybe_path("tls_cert", "serve HTTPS with this certificate (PEM; with --tls-key)", _readable)
TLS_KEY = maybe_path("tls_key", "the certificate's private key (PEM)", _readable)
MAX_CONNECTIONS = whole(
    "max_connections", 1000, "connections served at once; more get 503 (16 to 100000)", low=16, high=100_000
)
_SIGN_IN_HELP = (
    "failed sign-ins from one address, each within 10s of the last, before it gets 429 until it is"
    " quiet for 10s (0: no limit)"
)
SIGN_IN_LIMIT = whole("sign_in_limit", 20, _SIGN_IN_HELP, low=0, high=100_000)
TRUSTED_PROXY: Knob[tuple[str, ...]] = Knob(
    "trusted_proxy",
    list[str] | None,
    None,
    _networks,
    "a reverse proxy in front of the API (an address or network, repeatable) whose X-Forwarded-For"
    " the audit log believes; none by default: the client's address is the socket's",
    "trusted_proxies",
)
GATEWAY_PORT = whole(
    "gateway_port",
    DEFAULT_GATEWAY_PORT,
    "port of the gateway to services (/NAME/) and jobs' published ports (/jobs/ID/), a process the"
    " head starts and stops (0: any free port)",
    low=0,
    high=65535,
)
GATEWAY = switch("gateway", True, "--no-gateway: start none (services then have no URL)", "--gateway/--no-gateway")
_PROCESSES_HELP = "gateway processes sharing its port, each with its share of every replica's cap (1 to 64)"
GATEWAY_PROCESSES = whole("gateway_processes", 1, _PROCESSES_HELP, low=1, high=64)
POWER_BUDGET = Knob("power_budget", str, "0", read_budget, "GPU power budget: 20kW (0: none)", "power_budget_w")
AUTOSCALE_WINDOW = duration("autoscale_window", "30s", "the span of load the autoscaler averages (1s to 10m)", 1, 600)
MAX_SLOWDOWN = number("max_slowdown", 20.0, _SLOWDOWN_HELP, field="max_slowdown_pct", low=0, high=90)


def table(*knobs: Knob[Any]) -> tuple[Knob[Any], ...]:
    """The knobs, in ``gpupool up --help``'s order; a name, field or flag declared twice is refused."""
    for what in ("name", "setting", "flag", "envvar"):
        keys = [getattr(knob, what) for knob in knobs]
        twice = [i for i, key in enumerate(keys) if key in keys[:i]]
        if twice:
            raise ValueError(f"knob {knobs[twice[0]].name!r}: {what} {keys[twice[0]]!r} declared twice")
    return knobs


KNOBS = table(
    PORT,
    HOST,
    DATA_DIR,
    DB,
    FAKE_NODES,
    FAKE_GPUS,
    FAKE_GPU_MODEL,
    FAKE_HARDWARE,
    KILL_GRACE,
    FAIR_SHARE_HALF_LIFE,
    PLACEMENT,
    POLICY,
    PARTITION,
    INTERVAL,
    RECLAIM_MIN_RUN,
    MAX_WAIT,
    FAIR_RECLAIM,
    BACKEND,
    RAY_ADDRESS,
    NODE_NAME,
    NODE_TIMEOUT,
    TELEMETRY_EVERY,
    IDLE_THRESHOLD,
    IDLE_AFTER,
    ALERT_TEMPERATURE,
    CGROUPS,
    ALLOW_SYSTEM_ACCOUNTS,
    RESTART_BACKOFF,
    KEEP_FINISHED,
    MAX_LOG_SIZE,
    MAX_USER_ARRAYS,
    MAX_USER_LOGS,
    IMAGE_CACHE,
    IMAGE_WAIT,
    MAX_BODY,
    CLIENT_TIMEOUT,
    TLS_CERT,
    TLS_KEY,
    MAX_CONNECTIONS,
    SIGN_IN_LIMIT,
    TRUSTED_PROXY,
    GATEWAY_PORT,
    GATEWAY,
    GATEWAY_PROCESSES,
    AUTOSCALE_WINDOW,
    MAX_SLOWDOWN,
    POWER_BUDGET,
)

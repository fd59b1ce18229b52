"""The one ``Settings`` object, built by the faces (CLI, tests) at start-up and passed down.
Nothing below the faces reads the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupool.domain.arrays import DEFAULT_MAX_USER_ARRAYS
from gpupool.domain.user_logs import DEFAULT_MAX_USER_LOG_BYTES
from gpupool.domain.worker_env import inherited_env

if TYPE_CHECKING:
    from gpupool.scheduler.config import SchedulerConfig

DEFAULT_PORT = 7070
DEFAULT_GATEWAY_PORT = 7071
TOKEN_FILE = "admin-token"
JOIN_TOKEN_FILE = "join-token"


def default_data_dir(environ: Mapping[str, str]) -> Path:
    if environ.get("GPUPOOL_DATA_DIR"):
        return Path(environ["GPUPOOL_DATA_DIR"]).expanduser()
    xdg = environ.get("XDG_DATA_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".local" / "share")
    return Path(xdg) / "gpupool"


def default_config_dir(environ: Mapping[str, str]) -> Path:
    """The user's gpupool config dir (the CLI's credentials): ``$XDG_CONFIG_HOME/gpupool``, else
    ``~/.config/gpupool``. A relative XDG_CONFIG_HOME is ignored, as the XDG spec says."""
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if not xdg or not Path(xdg).is_absolute():
        xdg = str(Path(environ.get("HOME", "~")).expanduser() / ".config")
    return Path(xdg) / "gpupool"


def worker_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What every job gets of ``environ``: the allow-list of ``domain.worker_env``, never the rest
    (no token, no data dir, no Ray secret)."""
    return inherited_env(environ)


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    db_url: str | None = None
    fake_nodes: int | None = None
    fake_gpus: int | None = None
    fake_gpu_model: str | None = None
    fake_hardware: Path | None = None
    kill_grace_s: float = 10.0
    interval_s: float = 0.5
    fair_share_half_life_s: float = 86400.0
    placement: str = "frag"
    policy: str = "default"  # a name in scheduler.policies.POLICIES
    partition: str | None = None  # an isolating policy's partition (nodes or gpus); None: the policy's own
    reclaim_min_run_s: float = 0.0  # a borrower's job runs this long before reclaim may stop it
    # "local": virtual nodes on this machine; "ray": every node of a Ray cluster (issue 5).
    backend: str = "local"
    ray_address: str | None = None
    node_name: str | None = None
    # A node silent this long is declared down; its workers fence themselves after half of it.
    node_timeout_s: float = 10.0
    # GPU readings every this long; an allocated GPU below idle_threshold_pct for idle_after_s is idle.
    telemetry_every_s: float = 5.0
    idle_threshold_pct: float = 5.0
    idle_after_s: float = 600.0
    alert_temperature_c: float = 85.0
    cgroups: bool = True  # workers in cgroups where the node can make them (local backend)
    allow_system_accounts: bool = False  # jobs may run as root or accounts below UID_MIN (DisableRootJobs=NO)
    keep_finished_s: float = 30 * 86400.0  # finished jobs, their events, run dirs and logs are kept so long
    max_log_bytes: int = 100 * 2**20  # each worker's log is cut to its newest half past this
    max_user_arrays: int = DEFAULT_MAX_USER_ARRAYS  # arrays with an unfinished task, per user (each up to 10,000 tasks)
    max_user_log_bytes: int = DEFAULT_MAX_USER_LOG_BYTES  # each user's logs; the oldest finished jobs' emptied first
    restart_backoff_s: float = 10.0  # a failed job's first wait before its next attempt, doubling per failure
    # The API's door (api/guard.py): the largest request body, how long a client may take to send
    # its headers, then its body, and how many connections are served at once (then 503).
    max_body_bytes: int = 1 << 20
    tls_cert: Path | None = None  # with tls_key: the API is served over HTTPS
    tls_key: Path | None = None
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    max_connections: int = 1000
    sign_in_limit: int = 20  # failed sign-ins from one address in a burst before it gets 429 (0: no limit)
    trusted_proxies: tuple[str, ...] = ()  # whose X-Forwarded-For the API believes (audit log); none: the socket's
    # The gateway to services and jobs' published ports, a process the head starts (0: any free
    # port; None: none), and the span of its load reports the autoscaler averages over.
    gateway_port: int | None = DEFAULT_GATEWAY_PORT
    autoscale_window_s: float = 30.0
    base_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.data_dir / 'gpupool.db'}"

    @property
    def token_file(self) -> Path:
        return self.data_dir / TOKEN_FILE

    @property
    def scheduler_config(self) -> SchedulerConfig:
        """The named policy, with the chosen placement plugin (and partition): what the head's controller runs.
        Imported here, not at the top: every CLI command reads this module, only the head needs
        the scheduler (~55 ms of imports)."""
        from dataclasses import replace

        from gpupool.scheduler import policies

        config = policies.for_head(self.policy, placement=self.placement, partition=self.partition)
        return replace(config, reclaim_min_run_s=self.reclaim_min_run_s)

    @classmethod
    def from_environ(cls, data_dir: Path | None = None, **overrides: Any) -> Settings:
        environ = dict(os.environ)
        return cls(
            data_dir=(data_dir or default_data_dir(environ)).resolve(), base_env=worker_base_env(environ), **overrides
        )

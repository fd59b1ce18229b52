"""The one ``Settings`` object, built by the faces (CLI, tests) at start-up and passed down.
Nothing below the faces reads the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupool import knobs
from gpupool.domain.errors import InvalidInput
from gpupool.domain.worker_env import inherited_env
from gpupool.knobs import DEFAULT_PORT as DEFAULT_PORT

# In paths.py, light enough for the CLI's start; still importable from here.
from gpupool.paths import JOIN_TOKEN_FILE as JOIN_TOKEN_FILE
from gpupool.paths import TOKEN_FILE as TOKEN_FILE
from gpupool.paths import default_config_dir as default_config_dir
from gpupool.paths import default_data_dir as default_data_dir

if TYPE_CHECKING:
    from gpupool.domain.alerts import AlertRules
    from gpupool.domain.idle import IdleSettings
    from gpupool.scheduler.config import SchedulerConfig


def worker_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What every job gets of ``environ``: the allow-list of ``domain.worker_env``, never the rest
    (no token, no data dir, no Ray secret)."""
    return inherited_env(environ)


@dataclass(frozen=True, slots=True)
class Settings:
    """What the head runs with. Each field but ``base_env`` is a knob of ``gpupool.knobs`` (its flag,
    bounds and help are there) and takes its default from it; tests/cli/test_knobs.py checks that
    the two agree. ``data_dir`` has no default: the environment's is chosen where it is read."""

    data_dir: Path
    host: str = knobs.HOST.default
    port: int = knobs.PORT.default
    db_url: str | None = knobs.DB.default
    fake_nodes: int | None = knobs.FAKE_NODES.default
    fake_gpus: int | None = knobs.FAKE_GPUS.default
    fake_gpu_model: str | None = knobs.FAKE_GPU_MODEL.default
    fake_hardware: Path | None = knobs.FAKE_HARDWARE.default
    kill_grace_s: float = knobs.KILL_GRACE.default
    interval_s: float = knobs.INTERVAL.default
    fair_share_half_life_s: float = knobs.FAIR_SHARE_HALF_LIFE.default
    placement: str = knobs.PLACEMENT.default
    policy: str = knobs.POLICY.default  # a name in scheduler.policies.POLICIES
    partition: str | None = knobs.PARTITION.default  # an isolating policy's partition; None: the policy's own
    reclaim_min_run_s: float = knobs.RECLAIM_MIN_RUN.default
    max_wait_s: float = knobs.MAX_WAIT.default  # aging (issue 34); 0: off
    fair_reclaim: bool = knobs.FAIR_RECLAIM.default  # reclaim beyond quotas, down to fair shares (issue 34)
    backend: str = knobs.BACKEND.default  # a row of backends.py's table
    ray_address: str | None = knobs.RAY_ADDRESS.default
    node_name: str | None = knobs.NODE_NAME.default
    node_timeout_s: float = knobs.NODE_TIMEOUT.default  # its workers fence themselves after half of it
    telemetry_every_s: float = knobs.TELEMETRY_EVERY.default
    idle_threshold_pct: float = knobs.IDLE_THRESHOLD.default
    idle_after_s: float = knobs.IDLE_AFTER.default
    alert_temperature_c: float = knobs.ALERT_TEMPERATURE.default
    cgroups: bool = knobs.CGROUPS.default
    allow_system_accounts: bool = knobs.ALLOW_SYSTEM_ACCOUNTS.default
    restart_backoff_s: float = knobs.RESTART_BACKOFF.default
    keep_finished_s: float = knobs.KEEP_FINISHED.default
    max_log_bytes: int = knobs.MAX_LOG_SIZE.default
    max_user_arrays: int = knobs.MAX_USER_ARRAYS.default
    max_user_log_bytes: int = knobs.MAX_USER_LOGS.default
    image_cache_bytes: int = knobs.IMAGE_CACHE.default  # each node's unpacked images (issue 32)
    image_wait_s: float = knobs.IMAGE_WAIT.default  # for an image no node can get now, then the job fails
    max_body_bytes: int = knobs.MAX_BODY.default
    client_timeout_s: float = knobs.CLIENT_TIMEOUT.default  # for a request's headers, and then its body
    tls_cert: Path | None = knobs.TLS_CERT.default
    tls_key: Path | None = knobs.TLS_KEY.default
    max_connections: int = knobs.MAX_CONNECTIONS.default
    sign_in_limit: int = knobs.SIGN_IN_LIMIT.default
    trusted_proxies: tuple[str, ...] = knobs.TRUSTED_PROXY.default
    gateway_port: int = knobs.GATEWAY_PORT.default  # 0: any free port
    gateway: bool = knobs.GATEWAY.default
    gateway_processes: int = knobs.GATEWAY_PROCESSES.default  # on its one port (SO_REUSEPORT)
    autoscale_window_s: float = knobs.AUTOSCALE_WINDOW.default
    max_slowdown_pct: float = knobs.MAX_SLOWDOWN.default  # what efficient may cost in speed (issue 33)
    power_budget_w: float = knobs.POWER_BUDGET.default  # the GPUs' budget (issue 33); 0: none
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
        min_run_s, max_wait_s, fair = self.reclaim_min_run_s, self.max_wait_s, self.fair_reclaim
        return replace(config, reclaim_min_run_s=min_run_s, max_wait_s=max_wait_s, fair_reclaim=fair)

    @property
    def idle(self) -> IdleSettings:
        """What makes an allocated GPU idle (the controller's idle check, the API's job views).
        The domain types are imported here: every CLI command reads this module, only the head these."""
        from gpupool.domain.idle import IdleSettings

        return IdleSettings(self.idle_threshold_pct, self.idle_after_s)

    @property
    def alerts(self) -> AlertRules:
        from gpupool.domain.alerts import AlertRules

        return AlertRules(temperature_c=self.alert_temperature_c)

    @classmethod
    def from_options(cls, given: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Settings:
        """The settings from ``gpupool up``'s options (by knob name), each read and checked by its
        knob; the data dir, when none was given, is the environment's (``default_data_dir``)."""
        environ = dict(os.environ) if environ is None else environ
        _check_together(given)
        values = {knob.setting: knob.read(knob, given[knob.name]) for knob in knobs.KNOBS}
        data_dir = values.pop("data_dir") or default_data_dir(environ)
        return cls(data_dir=data_dir.resolve(), base_env=worker_base_env(environ), **values)


def _check_together(given: Mapping[str, Any]) -> None:
    """The checks that read more than one option, before any is read: a policy and its partition,
    the gateway's port against the API's, the TLS certificate with its key."""
    from gpupool.scheduler.policies import for_head

    for_head(given["policy"], partition=given["partition"])  # unknown or simulator-only: refused before anything
    if given["gateway"] and given["gateway_port"] and given["gateway_port"] == given["port"]:
        raise InvalidInput(f"--gateway-port {given['gateway_port']} is the API's --port: give the gateway another one")
    if (given["tls_cert"] is None) != (given["tls_key"] is None):
        raise InvalidInput("--tls-cert and --tls-key go together: give both to serve HTTPS")

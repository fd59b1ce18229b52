"""The controller's settings: what the head gives it from its own (``gpupool up``'s flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain.alerts import AlertRules
from gpupool.domain.audit import AUDIT_KEPT
from gpupool.domain.idle import IdleSettings
from gpupool.domain.power import DEFAULT_MAX_SLOWDOWN
from gpupool.domain.telemetry import TelemetryRetention
from gpupool.domain.user_logs import DEFAULT_MAX_USER_LOG_BYTES


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    interval_s: float = 0.5
    kill_grace_s: float = 10.0
    # A quiet cluster is still rescheduled this often, as a safety net under the event-driven cycles.
    full_cycle_s: float = 5.0
    # Fair share remembers usage with this half-life (0: only what is held now counts).
    fair_share_half_life_s: float = 86400.0
    usage_every_s: float = 10.0
    # How often the executor is asked which nodes it serves (joins, deaths on the Ray backend).
    node_sync_s: float = 1.0
    # GPU telemetry: every node that is not down is read this often (clock time), and kept so long.
    telemetry_every_s: float = 5.0
    telemetry_retention: TelemetryRetention = field(default_factory=TelemetryRetention)
    # What makes an allocated GPU idle, and when GPU and node alerts are raised.
    idle: IdleSettings = field(default_factory=IdleSettings)
    alerts: AlertRules = field(default_factory=AlertRules)
    # The audit log keeps this long (90 days); older entries are pruned this often.
    audit_kept_s: float = AUDIT_KEPT.total_seconds()
    audit_prune_every_s: float = 3600.0
    # A job requeued after a failure waits this long before its next attempt, doubling per failure
    # (the head sets it from --restart-backoff; 0 here: a controller built in a test requeues at once).
    restart_backoff_s: float = 0.0
    # A job whose image no node can get now is tried again each minute for this long, then fails
    # (the head sets it from --image-wait, whose default this is; 0: it fails at once).
    image_wait_s: float = 3600.0
    # Finished jobs, their events, run directories and logs are deleted this long after they ended.
    keep_finished_s: float = 30 * 86400.0
    # Users' jobs may run as root or system accounts (gpupool up --allow-system-accounts); the
    # nodes refuse them otherwise, whatever the head checked at submit.
    allow_system_accounts: bool = False
    # Each user's jobs' logs together, on every node, are kept under this (--max-user-logs; 0: no cap).
    max_user_log_bytes: int = DEFAULT_MAX_USER_LOG_BYTES
    user_logs_every_s: float = 60.0  # and soon after exits (at most every 15 s)
    # efficient (--gpu-power) picks the least energy at most this much slower than max (--max-slowdown).
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN
    # The pool's GPU power budget in watts (--power-budget; 0: none), kept by the scheduler at
    # starts and by the throttle on measured draw (issue 33). Nodes' own budgets are in the store.
    power_budget_w: float = 0.0

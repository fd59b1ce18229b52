"""What a service call may touch, injected once at start-up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gpupool.clock import Clock
from gpupool.domain.arrays import DEFAULT_MAX_USER_ARRAYS
from gpupool.domain.idle import IdleSettings
from gpupool.executors.base import Executor
from gpupool.scheduler.config import SchedulerConfig
from gpupool.store.db import Database
from gpupool.store.sealing import Sealer
from gpupool.usecases.accounts import JobAccounts
from gpupool.usecases.grants import SubmitGrants
from gpupool.usecases.load import LoadBoard


@dataclass(frozen=True, slots=True)
class RayCluster:
    """What a joining node needs to become part of the head's Ray cluster."""

    address: str
    token: str
    node_timeout_s: float


@dataclass(slots=True)
class GatewayPlace:
    """Where the head's gateway listens: its port is known only once it is ready (``gpupool up
    --gateway-port 0`` takes any free one), after the context is built, so this one is mutable and
    set once. ``port`` None: the head runs no gateway (``--no-gateway``)."""

    port: int | None = None
    tls: bool = False  # it serves HTTPS (the head's certificate)

    def url(self, base_url: str, path: str) -> str | None:
        """The gateway's URL for ``path``, on the host the caller reached the head by (the
        gateway listens on the head's address): what a person can open from where they are."""
        if self.port is None:
            return None
        host = urlsplit(base_url).hostname or "127.0.0.1"
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{self.port}{path}"


@dataclass(frozen=True, slots=True)
class HeadContext:
    db: Database
    clock: Clock
    executor: Executor
    wake_controller: Callable[[], None]
    ray: RayCluster | None = None  # None on the local backend
    idle: IdleSettings = field(default_factory=IdleSettings)  # what the head counts as an idle GPU
    accounts: JobAccounts = field(default_factory=JobAccounts)  # whose Unix account each job runs as
    grants: SubmitGrants = field(default_factory=SubmitGrants)  # who may submit where, for a second
    # A service was made, changed or deleted: the service reconciler (and the controller) look now.
    # Not called for every job: a submission waking the reconciler cost ~0.4 ms of each one.
    wake_services: Callable[[], None] = field(default=lambda: None)
    load: LoadBoard = field(default_factory=LoadBoard)  # the gateway's reports of replica load, in memory
    gateway: GatewayPlace = field(default_factory=GatewayPlace)  # where services and jobs' ports are served
    # The policy the controller runs: `why` replays job ends through it for a start estimate.
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    # The gateway's identity, minted at this head's start and kept only in memory and a 0600 file
    # the gateway reads: no token route can revoke or narrow it. None: no gateway identity.
    gateway_secret: str | None = None
    max_user_arrays: int = DEFAULT_MAX_USER_ARRAYS  # arrays with an unfinished task, per user
    # Seals users' registry logins at rest (its key in the head's data dir; a test's: in memory).
    sealer: Sealer = field(default_factory=Sealer.ephemeral)
    power_budget_w: float = 0.0  # the pool's GPU power budget (--power-budget; 0: none), for /metrics

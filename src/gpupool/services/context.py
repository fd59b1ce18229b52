"""What a service call may touch, injected once at start-up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.clock import Clock
from gpupool.domain.idle import IdleSettings
from gpupool.executors.base import Executor
from gpupool.services.accounts import JobAccounts
from gpupool.services.grants import SubmitGrants
from gpupool.services.load import LoadBoard
from gpupool.store.db import Database


@dataclass(frozen=True, slots=True)
class RayCluster:
    """What a joining node needs to become part of the head's Ray cluster."""

    address: str
    token: str
    node_timeout_s: float


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

"""The worker's PostgreSQL connection budget: pool sizes derived from one setting, and the
start-up check of that budget against what the server allows. Pure, except ``check``."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from db.server import ConnectionLimits
from streams.settings import Settings

log = logging.getLogger(__name__)

SETTING = "DB_MAX_CONNECTIONS_PER_WORKER"
LISTEN = 1
"""The outbox relay's LISTEN connection (its own: a pooled one would lose LISTEN)."""


@dataclass(frozen=True, slots=True)
class ConnectionPlan:
    budget: int
    """DB_MAX_CONNECTIONS_PER_WORKER: the most both processes of one worker may open."""
    processes: int
    """Processes with a pool: the worker, and its timer process unless WORKER_TIMER_PROCESS=false."""
    pool_size: int
    """Each process's pool: (budget - LISTEN - read pool) // processes, at most
    DB_POOL_MAX_SIZE."""
    read: int = 0
    """The worker's read pages' pool (WEB_READ_POOL_SIZE; streams/runtime.py)."""
    listen: int = LISTEN

    @property
    def total(self) -> int:
        return self.processes * self.pool_size + self.read + self.listen

    def describe(self) -> str:
        pools = f"{self.processes} pool{'s' if self.processes > 1 else ''} of {self.pool_size}"
        return f"{self.total} of {self.budget} ({pools} + {self.read} read + {self.listen} LISTEN)"


def plan(settings: Settings) -> ConnectionPlan:
    """The pools' sizes for ``settings``; ValueError naming the setting if it cannot fit."""
    budget = settings.db_max_connections_per_worker
    processes = 2 if settings.worker_timer_process else 1
    read = settings.web_read_pool_size
    per_process = (budget - LISTEN - read) // processes
    if per_process < 1:
        raise ValueError(
            f"{SETTING}={budget} leaves no pool connection: a worker needs {LISTEN} LISTEN "
            f"connection, WEB_READ_POOL_SIZE={read} for its read pages, plus at least one per "
            f"process ({processes} processes)"
        )
    return ConnectionPlan(budget, processes, min(settings.db_pool_max_size, per_process), read)


def problem(settings: Settings, limits: ConnectionLimits) -> str | None:
    """Why the worker's budget cannot fit the server, or None."""
    budget = settings.db_max_connections_per_worker
    if budget <= limits.available:
        return None
    return (
        f"{SETTING}={budget} is more than PostgreSQL lets this role open: max_connections="
        f"{limits.max_connections} - superuser_reserved_connections={limits.superuser_reserved}"
        f" - reserved_connections={limits.reserved} = {limits.available}. Lower {SETTING} or "
        f"raise max_connections: N workers need N x {SETTING} plus the migrations and CLI jobs "
        f"(docs/deploy.md, 'Connection budget')"
    )


def fits(settings: Settings, limits: ConnectionLimits) -> int:
    """How many workers of this budget the server holds."""
    return limits.available // settings.db_max_connections_per_worker

"""The worker's startup gate: PostgreSQL first, the connection budget checked against it,
then Kafka (each waited for with streams/startup_wait.py's ``wait_for``), run on the loop
the worker will run on, with its own stderr logging, SIGTERM/SIGINT handling and exit codes
(0 start, 1 STARTUP_WAIT_SECONDS ran out, 2 bad configuration, 128 + signal stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator

from db.server import ConnectionLimits
from streams import logs
from streams.kafka_client import security_options
from streams.settings import Settings
from streams.startup_wait import (
    DependencyConfigError,
    DependencyTimeout,
    kafka_dependency,
    postgres_dependency,
    wait_for,
)

# The wait's lines, whichever module writes them, go to one logger (startup_logging).
log = logging.getLogger("streams.startup_wait")


async def check_connection_budget(settings: Settings) -> ConnectionLimits:
    """DB_MAX_CONNECTIONS_PER_WORKER against what the server allows (max_connections minus
    its reserved slots); DependencyConfigError naming both when the budget cannot fit."""
    from db import server
    from db.connector import connect
    from streams import connection_budget

    conn = await connect(settings.database_url, timeout=10)
    try:
        limits = await server.connection_limits(conn)
    finally:
        await conn.close()
    found = connection_budget.problem(settings, limits)
    if found is not None:
        raise DependencyConfigError(connection_budget.SETTING, found)
    logs.event(
        log,
        logging.INFO,
        "connection_budget",
        uses=connection_budget.plan(settings).describe().replace(" ", "_"),
        server_available=limits.available,
        fits_workers=connection_budget.fits(settings, limits),
    )
    return limits


async def wait_for_dependencies(
    settings: Settings,
    *,
    after_postgres: Callable[[], Awaitable[None]] | None = None,
    after_kafka: Callable[[], Awaitable[None]] | None = None,
    status: dict[str, str] | None = None,
) -> float:
    """The worker's startup gate: PostgreSQL first (the ledger) and the connection budget
    checked against it, then Kafka. ``after_postgres`` runs in between: what needs only
    PostgreSQL (the timer process) starts without waiting for Kafka."""
    limit = settings.startup_wait_seconds
    status = {} if status is None else status
    status.update(postgres="waiting", kafka="waiting")
    waited = await wait_for(
        [postgres_dependency(settings.database_url)], limit_s=limit, status=status
    )
    # Before anything opens its pools: the budget must fit what the server allows.
    await check_connection_budget(settings)
    if after_postgres is not None:
        await after_postgres()
    kafka = kafka_dependency(
        settings.kafka_bootstrap,
        options=security_options(settings),
        replication_factor=settings.kafka_replication_factor,
    )
    # The limit is for the whole wait.
    waited = await wait_for([kafka], limit_s=limit, status=status, waited_before=waited)
    if after_kafka is not None:
        await after_kafka()  # a missing ACL: DependencyConfigError naming it
    return waited


@contextlib.contextmanager
def startup_logging(level: str, log_format: str = "text") -> Iterator[None]:
    """A stderr handler for the wait, before Faust sets up its own logging (removed after,
    so lines are not printed twice once the worker runs)."""
    logger = logging.getLogger("streams.startup_wait")
    handler = logging.StreamHandler()
    handler.setFormatter(logs.formatter(log_format))
    before = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]


def startup_gate(
    loop: asyncio.AbstractEventLoop,
    settings: Settings,
    *,
    after_postgres: Callable[[], Awaitable[None]] | None = None,
    after_kafka: Callable[[], Awaitable[None]] | None = None,
    health: Callable[[dict[str, str]], contextlib.AbstractAsyncContextManager[object]]
    | None = None,
) -> int:
    """Wait for the dependencies on ``loop``. Returns 0 to start the worker, else the exit
    code after printing why: 2 bad configuration, 1 STARTUP_WAIT_SECONDS ran out, 143/130
    stopped by SIGTERM/SIGINT while waiting (the container's PID 1 has no default handler).
    ``after_postgres`` runs once PostgreSQL answers, ``after_kafka`` once Kafka does (the
    worker's ACL check); within ``health(status)`` (the startup
    /health) the wait's status is served until the worker serves its own."""
    status: dict[str, str] = {}

    async def gate() -> float:
        async with health(status) if health is not None else contextlib.nullcontext():
            return await wait_for_dependencies(
                settings, after_postgres=after_postgres, after_kafka=after_kafka, status=status
            )

    task = loop.create_task(gate())
    stopped_by: list[int] = []

    def stop(sig: int) -> None:
        stopped_by.append(sig)
        task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig)
    try:
        with startup_logging(settings.log_level, settings.log_format):
            loop.run_until_complete(task)
    except asyncio.CancelledError:
        print("stopped while waiting for dependencies", file=sys.stderr)
        return 128 + (stopped_by[0] if stopped_by else signal.SIGTERM)
    except DependencyConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DependencyTimeout as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0

"""The connection budget at start-up, against the real server's max_connections."""

from __future__ import annotations

import pytest

from db import server
from db.connector import connect
from streams import connection_budget
from streams.runtime import Runtime
from streams.settings import Settings
from streams.startup_gate import check_connection_budget
from streams.startup_wait import DependencyConfigError

pytestmark = pytest.mark.integration


async def _limits(database_url: str) -> server.ConnectionLimits:
    conn = await connect(database_url)
    try:
        return await server.connection_limits(conn)
    finally:
        await conn.close()


async def test_a_budget_over_what_the_server_allows_stops_the_worker_naming_both(
    database_url: str,
) -> None:
    limits = await _limits(database_url)
    assert limits.max_connections > limits.available > 0
    over = Settings(database_url=database_url, db_max_connections_per_worker=limits.available + 1)
    with pytest.raises(DependencyConfigError) as raised:
        await check_connection_budget(over)
    message = str(raised.value)
    assert f"DB_MAX_CONNECTIONS_PER_WORKER={limits.available + 1}" in message
    assert f"max_connections={limits.max_connections}" in message
    assert f"superuser_reserved_connections={limits.superuser_reserved}" in message
    assert f"= {limits.available}" in message


async def test_a_budget_that_fits_passes_and_says_how_many_workers_fit(database_url: str) -> None:
    limits = await _limits(database_url)
    fits = Settings(database_url=database_url, db_max_connections_per_worker=limits.available)
    assert await check_connection_budget(fits) == limits
    assert connection_budget.fits(fits, limits) == 1


async def test_the_worker_pool_takes_its_size_from_the_budget(database_url: str) -> None:
    runtime = Runtime(Settings(database_url=database_url, db_max_connections_per_worker=8))
    try:
        pool = await runtime.pool()
        assert pool.get_max_size() == 3  # (8 - 1 LISTEN - 1 read) // 2 processes
        with runtime.reading():
            read = await runtime.pool()
        assert read is not pool and read.get_max_size() == 1  # WEB_READ_POOL_SIZE
    finally:
        await runtime.close()

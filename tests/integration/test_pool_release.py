"""A released pooled connection: no reset query is sent (db/connector.py, _no_session_state),
yet nothing of its last user's transaction reaches the next one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from db.connector import connection, create_pool


@pytest.fixture
async def one_connection(database_url: str) -> AsyncIterator[tuple[asyncpg.Pool, list[str]]]:
    """A pool of one connection, and every statement that connection sends from now on."""
    statements: list[str] = []
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with connection(pool) as conn:
            conn.add_query_logger(lambda q: statements.append(q.query))
        yield pool, statements
    finally:
        await pool.close()


async def test_a_connection_released_inside_a_transaction_comes_back_rolled_back(
    one_connection: tuple[asyncpg.Pool, list[str]], database_url: str
) -> None:
    pool, statements = one_connection
    async with connection(pool) as conn:
        # A user that leaves without ending its transaction (no `async with` around it).
        await conn.execute("BEGIN")
        assert await conn.fetchval("SELECT pg_try_advisory_xact_lock(4242)")
    other = await asyncpg.connect(database_url)
    try:
        # The transaction (and its lock) ended on release: another session can take it.
        assert await other.fetchval("SELECT pg_try_advisory_xact_lock(4242)")
    finally:
        await other.close()
    async with connection(pool) as conn:
        assert not conn.is_in_transaction()
    assert statements[-1] == "ROLLBACK", statements


async def test_a_released_connection_sends_no_reset_query(
    one_connection: tuple[asyncpg.Pool, list[str]],
) -> None:
    pool, statements = one_connection
    for n in (1, 2):
        async with connection(pool) as conn:
            await conn.fetchval(f"SELECT {n}")
    assert statements == ["SELECT 1", "SELECT 2"], statements

"""The one place that creates asyncpg pools and translates driver errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg


class DatabaseUnavailable(Exception):
    """PostgreSQL could not be reached or the connection broke: retry later, input is fine."""


# Errors that say "the database or the network is in trouble", not "this row is wrong".
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.QueryCanceledError,
)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, (*TRANSIENT_ERRORS, DatabaseUnavailable))


async def _init_connection(conn: asyncpg.Connection) -> None:
    # jsonb <-> Python objects; plain json stays text so stored payloads keep their bytes.
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def connect(dsn: str, **kwargs: Any) -> asyncpg.Connection:
    """A single connection (for LISTEN, migrations) with the project's codecs."""
    try:
        conn: asyncpg.Connection = await asyncpg.connect(dsn, **kwargs)
    except TRANSIENT_ERRORS as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
    await _init_connection(conn)
    return conn


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    try:
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=_init_connection, command_timeout=60
        )
    except TRANSIENT_ERRORS as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
    assert pool is not None
    return pool


@asynccontextmanager
async def transaction(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """Acquire a connection and run one transaction; commits on exit, rolls back on error."""
    async with pool.acquire() as conn, conn.transaction():
        yield conn

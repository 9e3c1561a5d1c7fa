"""Throwaway PostgreSQL databases for tests and benchmarks, and one-off reads by URL.

Every database is made through the admin database (``postgres``) of the server a URL points
at: ``create_database`` (empty, or a copy of a template), ``drop_database``,
``scratch_database`` (both around a block, migrated when not copied). A copy needs its
template free of connections: ``release`` ends them (CREATE DATABASE ... TEMPLATE refuses
a template in use).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from db.migrate import migrate

CONNECT_TIMEOUT = 60.0  # asyncpg's own default


class Unreachable(Exception):
    """The server's admin database could not be reached (nothing was run)."""


def with_database(url: str, name: str) -> str:
    """``url`` with its database name replaced by ``name``."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


async def admin(url: str, sql: str, *, timeout: float = CONNECT_TIMEOUT) -> None:
    """Run ``sql`` on the admin database of the server ``url`` points at."""
    try:
        conn = await asyncpg.connect(with_database(url, "postgres"), timeout=timeout)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        raise Unreachable(f"PostgreSQL at {url} is not reachable ({exc})") from exc
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def create_database(
    url: str, name: str, *, template: str | None = None, timeout: float = CONNECT_TIMEOUT
) -> str:
    """A new database ``name`` (empty, or a copy of ``template``); returns its URL."""
    copy = f' TEMPLATE "{template}"' if template else ""
    await admin(url, f'CREATE DATABASE "{name}"{copy}', timeout=timeout)
    return with_database(url, name)


async def drop_database(url: str, name: str, *, timeout: float = CONNECT_TIMEOUT) -> None:
    await admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', timeout=timeout)


async def release(url: str, name: str) -> None:
    """End every connection to database ``name`` (so that it can be copied)."""
    await admin(
        url, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
    )


@asynccontextmanager
async def scratch_database(
    url: str,
    name: str,
    *,
    template: str | None = None,
    migrated: bool = True,
    timeout: float = CONNECT_TIMEOUT,
) -> AsyncIterator[str]:
    """Database ``name`` for the block (a copy of ``template``, or a new one, migrated unless
    ``migrated`` is false); yields its URL and drops it afterwards."""
    new = await create_database(url, name, template=template, timeout=timeout)
    try:
        if template is None and migrated:
            await migrate(new)
        yield new
    finally:
        await drop_database(url, name, timeout=timeout)


async def scalar(db: str, sql: str, *args: Any) -> Any:
    """The first column of the first row of ``sql``, on a connection of its own."""
    conn = await asyncpg.connect(db)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()

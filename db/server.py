"""Repository of what the server itself reports (``db/queries/server.sql``): connection limits,
its clock, advisory lock holders. Its health ping and session planning are run by ``db/connector.py``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from db.connector import Connection
from db.queries import sql


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int
    superuser_reserved: int
    reserved: int
    """``reserved_connections`` (PostgreSQL 16+; 0 before)."""

    @property
    def available(self) -> int:
        """Connections an ordinary role may open."""
        return self.max_connections - self.superuser_reserved - self.reserved


@dataclass(frozen=True, slots=True)
class LockHolder:
    pid: int
    application_name: str | None
    client_addr: str | None
    backend_start: datetime | None
    state: str | None
    xact_start: datetime | None


async def connection_limits(conn: Connection) -> ConnectionLimits:
    row = await conn.fetchrow(sql("server_connection_limits"))
    assert row is not None
    return ConnectionLimits(
        int(row["max_connections"]), int(row["superuser_reserved"]), int(row["reserved"])
    )


async def clock(conn: Connection, *, timeout: float | None = None) -> datetime:
    """The database's time now (``clock_timestamp()``)."""
    value = await conn.fetchval(sql("server_clock"), timeout=timeout)
    assert isinstance(value, datetime)
    return value


async def advisory_lock_holders(conn: Connection, key: int) -> list[LockHolder]:
    rows = await conn.fetch(sql("server_advisory_lock_holders"), key)
    return [
        LockHolder(
            int(r["pid"]),
            r["application_name"],
            r["client_addr"],
            r["backend_start"],
            r["state"],
            r["xact_start"],
        )
        for r in rows
    ]


async def invalid_index(conn: Connection, schema: str, name: str) -> str | None:
    """The statement that drops index ``schema.name`` if an interrupted concurrent build left
    it INVALID; None when it is valid or absent."""
    value = await conn.fetchval(sql("server_invalid_index"), schema, name)
    return None if value is None else str(value)

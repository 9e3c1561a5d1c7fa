"""The one place that creates asyncpg pools and translates driver errors by what they mean.

Two meanings matter to callers:

- ``DatabaseUnavailable``: the database or the network is unwell (connection lost, disk
  full, out of memory, read-only after a failover, a lock not granted in time, a missing
  table or privilege). The input is fine: retry later, and block rather than lose it.
- ``InputRejected``: the database refused *this data* (SQLSTATE class 22 data exception,
  23 integrity violation, 54 program limit such as an index row too large). Retrying the
  same message can never succeed: it belongs in a dead-letter topic.

Anything not recognised as either is treated as unavailable: blocking is visible (the
partition stalls and ``/health`` says so) and loses nothing, dead-lettering a valid
message would lose it.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg

from db.queries import sql
from streams.errors import SafeMessage, describe

# What streams/ may name: the database port's types, not the driver module.
Pool = asyncpg.Pool
Connection = asyncpg.Connection
# A statement that is its own unit of work runs on the pool, or on the caller's connection.
Executor = Connection | Pool


class DatabaseUnavailable(SafeMessage, Exception):
    """PostgreSQL is unreachable or unwell: retry later, the input is fine."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class InputRejected(SafeMessage, Exception):
    """PostgreSQL refused the data of this statement (bad input, not a sick database)."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


# SQLSTATE classes that say "this data is wrong"; everything else says "the database is unwell".
REJECTING_CLASSES = frozenset({"22", "23", "54"})

# Driver-level failures of the connection itself (no SQLSTATE).
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
)

# Kept for callers that catch "cannot reach PostgreSQL" around connect().
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    *_CONNECTION_ERRORS,
    OSError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
)

Meaning = Literal["unavailable", "rejected"]


def classify(exc: BaseException) -> Meaning | None:
    """What a database error means; None when ``exc`` is not a database error at all."""
    if isinstance(exc, DatabaseUnavailable):
        return "unavailable"
    if isinstance(exc, InputRejected):
        return "rejected"
    if isinstance(exc, asyncpg.exceptions.DataError):
        # Raised by the driver while encoding a parameter: the value itself is unusable.
        return "rejected"
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        return "rejected" if state[:2] in REJECTING_CLASSES else "unavailable"
    if isinstance(exc, _CONNECTION_ERRORS) or type(exc) is OSError:
        # Only the network flavours of OSError: IsADirectoryError and friends are bugs or
        # bad input, and must not be retried forever as if the database were down.
        return "unavailable"
    return None


def translate(exc: BaseException) -> BaseException:
    """The project's exception for a driver error (the original is kept as ``__cause__``)."""
    meaning = classify(exc)
    if meaning is None or isinstance(exc, DatabaseUnavailable | InputRejected):
        return exc
    state = getattr(exc, "sqlstate", None)
    # The driver's text can quote row values (DETAIL, "invalid input syntax ... \"x\""):
    # only the class, SQLSTATE and schema identifiers are kept.
    message = describe(exc)
    if meaning == "rejected":
        return InputRejected(message, state)
    return DatabaseUnavailable(message, state)


def is_transient(exc: BaseException) -> bool:
    """Retry (and block) rather than dead-letter: the database, not the input, is the problem."""
    return classify(exc) == "unavailable"


@dataclass(frozen=True)
class SessionLimits:
    """Per-connection limits that keep a paused or dead worker from holding the cluster."""

    lock_timeout_seconds: float = 5.0
    """A statement waiting this long for a row or table lock fails (55P03, retried)."""
    idle_in_transaction_seconds: float = 60.0
    """PostgreSQL ends a session idle this long inside a transaction (e.g. a SIGSTOPped
    worker), releasing its locks; the worker's transaction rolls back and is redone."""
    keepalive_idle_seconds: int = 30
    """Server-side TCP keepalives notice a client host that vanished."""
    statement_timeout_seconds: float | None = None
    """PostgreSQL cancels a statement running longer (the read pages' pool; None: no limit)."""
    read_only: bool = False
    """Every transaction of the session is read-only (the read pages' pool)."""

    def server_settings(self, application_name: str | None = None) -> dict[str, str]:
        out = {
            "lock_timeout": str(int(self.lock_timeout_seconds * 1000)),
            "idle_in_transaction_session_timeout": str(
                int(self.idle_in_transaction_seconds * 1000)
            ),
            "tcp_keepalives_idle": str(self.keepalive_idle_seconds),
            "tcp_keepalives_interval": "10",
            "tcp_keepalives_count": "3",
        }
        if self.statement_timeout_seconds is not None:
            out["statement_timeout"] = str(max(1, int(self.statement_timeout_seconds * 1000)))
        if self.read_only:
            out["default_transaction_read_only"] = "on"
        if application_name:
            out["application_name"] = application_name[:63]
        return out


class PoolConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg is untyped
    """The pools' connections: asyncpg's, plus statements planned for their own parameters.

    Inside ``planning_for_parameters()`` every statement sent with arguments is prepared
    afresh, so PostgreSQL plans it for the values it runs with (a new prepared statement's
    first executions get a custom plan). Only that statement: the foreign key checks its
    inserts fire keep their cached plans. ``SET LOCAL plan_cache_mode = force_custom_plan``,
    which did this before, planned those checks again for every row inserted (61.5 against
    40.5 µs of PostgreSQL CPU per ingested calendar event, docs/benchmarks.md). The cost here
    is two more round trips per statement (preparing it, and closing the one before) and
    PostgreSQL parsing it: about what the checks' planning cost in batches of 40, 0.3-0.5 ms
    per batch for appliers without a foreign key; nothing measurable in full batches. Statements
    without arguments have nothing to plan for and run as usual; ``executemany`` is not
    covered.

    A fresh statement's text starts with ``FRESH``, so it is never the text of a cached one:
    asyncpg closes a statement on the server once it is unused, except while its text is
    also in the connection's cache.
    """

    FRESH = "-- prepared for its parameters\n"
    _fresh_plans = False

    @contextmanager
    def planning_for_parameters(self) -> Iterator[None]:
        before, self._fresh_plans = self._fresh_plans, True
        try:
            yield
        finally:
            self._fresh_plans = before

    async def _fresh(self, query: str, timeout: float | None, record_class: Any = None) -> Any:
        return await self.prepare(self.FRESH + query, timeout=timeout, record_class=record_class)

    async def fetch(
        self, query: str, *args: Any, timeout: float | None = None, record_class: Any = None
    ) -> Any:
        if self._fresh_plans and args:
            statement = await self._fresh(query, timeout, record_class)
            return await statement.fetch(*args, timeout=timeout)
        return await super().fetch(query, *args, timeout=timeout, record_class=record_class)

    async def fetchrow(
        self, query: str, *args: Any, timeout: float | None = None, record_class: Any = None
    ) -> Any:
        if self._fresh_plans and args:
            statement = await self._fresh(query, timeout, record_class)
            return await statement.fetchrow(*args, timeout=timeout)
        return await super().fetchrow(query, *args, timeout=timeout, record_class=record_class)

    async def fetchval(
        self, query: str, *args: Any, column: int = 0, timeout: float | None = None
    ) -> Any:
        if self._fresh_plans and args:
            statement = await self._fresh(query, timeout)
            return await statement.fetchval(*args, column=column, timeout=timeout)
        return await super().fetchval(query, *args, column=column, timeout=timeout)

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> Any:
        if self._fresh_plans and args:
            statement = await self._fresh(query, timeout)
            await statement.fetch(*args, timeout=timeout)
            return statement.get_statusmsg()
        return await super().execute(query, *args, timeout=timeout)


async def _init_connection(conn: asyncpg.Connection) -> None:
    # jsonb <-> Python objects; plain json stays text so stored payloads keep their bytes.
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def connect(dsn: str, **kwargs: Any) -> asyncpg.Connection:
    """A single connection (for LISTEN, migrations) with the project's codecs."""
    try:
        conn: asyncpg.Connection = await asyncpg.connect(dsn, **kwargs)
    except TRANSIENT_ERRORS as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {describe(exc)}") from exc
    await _init_connection(conn)
    return conn


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    limits: SessionLimits | None = None,
    application_name: str | None = None,
    on_statement: Callable[[], object] | None = None,
) -> asyncpg.Pool:
    """``on_statement`` is called once per statement any pool connection sends (BEGIN and
    COMMIT included): the worker counts them in ``reminders_db_statements_total``."""
    server_settings = limits.server_settings(application_name) if limits is not None else None

    async def init(conn: asyncpg.Connection) -> None:
        await _init_connection(conn)
        if on_statement is not None:
            conn.add_query_logger(lambda _query: on_statement())

    try:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            init=init,
            reset=_no_session_state,
            connection_class=PoolConnection,
            command_timeout=60,
            server_settings=server_settings,
        )
    except TRANSIENT_ERRORS as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {describe(exc)}") from exc
    assert pool is not None
    return pool


async def _no_session_state(_conn: asyncpg.Connection) -> None:
    """A released connection needs no reset query (the driver's default, ``pg_advisory_unlock_all();
    CLOSE ALL; UNLISTEN *; RESET ALL``, is one more round trip per unit of work): pooled
    connections change no session state. Their advisory locks are transaction-scoped, SET is
    only SET LOCAL, LISTEN has its own connection, and cursors live inside transactions. An
    open transaction is still rolled back by the driver before this is called."""


@asynccontextmanager
async def translating() -> AsyncIterator[None]:
    """Driver errors raised inside leave as ``DatabaseUnavailable`` or ``InputRejected`` (see
    the module docstring); anything else passes through unchanged. Used where a unit of work
    opens: ``transaction()``, and repositories that run single statements on a pool."""
    try:
        yield
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        translated = translate(exc)
        if translated is exc:
            raise
        raise translated from exc


@asynccontextmanager
async def connection(
    pool: asyncpg.Pool, *, timeout: float | None = None
) -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection for statements that are each their own unit of work (reads,
    single-statement writes), with driver errors translated (``translating``)."""
    async with translating(), pool.acquire(timeout=timeout) as conn:
        yield conn


@asynccontextmanager
async def transaction(
    pool: asyncpg.Pool, *, plan_for_parameters: bool = False
) -> AsyncIterator[asyncpg.Connection]:
    """Acquire a connection and run one transaction; commits on exit, rolls back on error,
    with driver errors translated (``translating``). ``plan_for_parameters``: every statement
    of the transaction with arguments is planned for them (``PoolConnection``), as batch
    statements need: a generic plan cannot see that ``unnest($1::uuid[])`` holds one batch
    of keys, and one made while a table was small scans it whole on every later batch
    (tests/integration/test_statement_plans.py)."""
    async with translating(), pool.acquire() as conn, conn.transaction():
        with conn.planning_for_parameters() if plan_for_parameters else nullcontext():
            yield conn


async def ping(conn: asyncpg.Connection, *, timeout: float | None = None) -> None:
    """Raise unless PostgreSQL answers a statement on ``conn``."""
    await conn.fetchval(sql("server_ping"), timeout=timeout)

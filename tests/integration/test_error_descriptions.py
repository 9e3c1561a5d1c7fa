"""Error descriptions are value-free: real driver errors from PostgreSQL (a unique and a
check violation, a bad literal, all carrying a marker value), pydantic and JSON errors are
described by class, SQLSTATE and schema identifiers, never by their text."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from pydantic import BaseModel, ValidationError

from db.connector import InputRejected, translating
from streams.errors import describe, redact_record, safe_traceback

MARKER = f"mk{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(database_url)
    await c.execute(
        "CREATE TABLE leak_probe (code text PRIMARY KEY, note text,"
        " n int CONSTRAINT leak_probe_n_negative CHECK (n < 0))"
    )
    await c.execute("INSERT INTO leak_probe VALUES ($1, $1, -1)", MARKER)
    try:
        yield c
    finally:
        await c.close()


async def _raised(conn: asyncpg.Connection, statement: str) -> asyncpg.PostgresError:
    with pytest.raises(asyncpg.PostgresError) as raised:
        await conn.execute(statement, MARKER)
    return raised.value


async def test_a_unique_violation_is_described_without_its_key(
    conn: asyncpg.Connection,
) -> None:
    exc = await _raised(conn, "INSERT INTO leak_probe VALUES ($1, 'x', -2)")
    assert MARKER in str(exc)  # the driver's own text carries DETAIL: Key (code)=(marker)
    text = describe(exc)
    assert text == (
        "UniqueViolationError [23505] schema=public table=leak_probe constraint=leak_probe_pkey"
    )


async def test_a_check_violation_is_described_without_the_failing_row(
    conn: asyncpg.Connection,
) -> None:
    exc = await _raised(conn, "INSERT INTO leak_probe VALUES ('other', $1, 5)")
    assert MARKER in str(exc)  # DETAIL: Failing row contains (other, marker, 5)
    assert describe(exc) == (
        "CheckViolationError [23514] schema=public table=leak_probe "
        "constraint=leak_probe_n_negative"
    )


async def test_a_message_that_quotes_the_value_is_not_kept(conn: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.PostgresError) as raised:
        await conn.execute(f"SELECT '{MARKER}'::uuid")
    assert MARKER in str(raised.value)  # invalid input syntax for type uuid: "marker"
    assert describe(raised.value) == "InvalidTextRepresentationError [22P02]"


async def test_a_translated_error_and_its_traceback_carry_no_value(
    conn: asyncpg.Connection,
) -> None:
    with pytest.raises(InputRejected) as raised:
        async with translating():
            await conn.execute("INSERT INTO leak_probe VALUES ($1, 'x', -2)", MARKER)
    exc = raised.value
    assert exc.sqlstate == "23505"
    assert MARKER not in str(exc)
    assert MARKER not in describe(exc)
    trace = safe_traceback(exc)
    assert "UniqueViolationError [23505]" in trace  # the cause is kept, described
    assert "direct cause" in trace
    assert MARKER not in trace


class _Doc(BaseModel):
    n: int


def test_pydantic_and_json_errors_are_described_by_class_only() -> None:
    with pytest.raises(ValidationError) as raised:
        _Doc.model_validate({"n": MARKER})
    assert MARKER in str(raised.value)  # input_value='marker'
    assert describe(raised.value) == "ValidationError"
    with pytest.raises(json.JSONDecodeError) as bad:
        json.loads('{"a": "' + MARKER + '", oops}')
    assert MARKER in bad.value.doc
    assert describe(bad.value) == "JSONDecodeError"
    assert describe(KeyError(MARKER)) == "KeyError"
    assert describe(ConnectionRefusedError(111, MARKER)) == "ConnectionRefusedError ECONNREFUSED"


async def test_a_log_record_with_the_error_as_argument_and_traceback_is_value_free(
    conn: asyncpg.Connection,
) -> None:
    exc = await _raised(conn, "INSERT INTO leak_probe VALUES ('other', $1, 5)")
    record = logging.LogRecord(
        "t", logging.ERROR, __file__, 1, "failed error=%s", (exc,), (type(exc), exc, None)
    )
    text = logging.Formatter().format(redact_record(record))
    assert "failed error=CheckViolationError [23514]" in text
    assert MARKER not in text

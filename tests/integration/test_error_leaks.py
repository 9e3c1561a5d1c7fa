"""Nothing leaks from a failed timer run: runs of the worker's own registry (real PostgreSQL,
the claim and finish of cluster-once slots) fail with a unique violation and a check
violation carrying a marker value; the marker is then on none of /timers, /status (JSON and
HTML), /metrics, the captured log, or any text or jsonb column of the database (but the
probe table the violations were about)."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from prometheus_client import generate_latest

from db.connector import transaction
from streams import errors
from streams.app import create_context
from streams.errors import install_log_redaction
from streams.settings import Settings
from streams.slices.context import SliceContext
from streams.timers import Mode, Schedule
from streams.timers.context import RunContext
from streams.timers.manual import run_manual
from streams.web.page import render_html
from streams.web.status import status, timer_list
from tests.conftest import KAFKA_BOOTSTRAP

MARKER = f"mk{uuid.uuid4().hex[:12]}"
PROBE = "leak_probe"


class Violate:
    """A handler whose statement PostgreSQL refuses with the marker in the DETAIL line."""

    def __init__(self, ctx: SliceContext, statement: str, *, translated: bool) -> None:
        self.ctx, self.statement, self.translated = ctx, statement, translated

    async def run_once(self, ctx: RunContext) -> None:
        pool = await self.ctx.runtime.pool()
        if self.translated:  # as the repositories run it: InputRejected from the driver error
            async with transaction(pool) as conn:
                await conn.execute(self.statement, MARKER)
        else:  # the driver's exception as it is
            await pool.execute(self.statement, MARKER)


@pytest.fixture
async def ctx(database_url: str, tmp_path: Path) -> AsyncIterator[SliceContext]:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            f"CREATE TABLE {PROBE} (code text PRIMARY KEY, note text,"
            " n int CONSTRAINT leak_probe_n_negative CHECK (n < 0))"
        )
        await conn.execute(f"INSERT INTO {PROBE} VALUES ($1, 'seed', -1)", MARKER)
    finally:
        await conn.close()
    settings = Settings(
        database_url=database_url,
        kafka_bootstrap=KAFKA_BOOTSTRAP,
        topic_prefix=f"leaks-{uuid.uuid4().hex[:8]}.",
        worker_data_dir=tmp_path,
        db_pool_max_size=4,
    )
    context = create_context(settings, worker_id="leak-worker")
    try:
        yield context
    finally:
        await context.runtime.close()
        # /status read the (never started) consumer, whose thread made an event loop of its
        # own that nothing runs on.
        thread = getattr(context.app.__dict__.get("_consumer"), "_thread", None)
        loop = getattr(thread, "thread_loop", None)
        if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running():
            loop.close()


@pytest.fixture
def redaction() -> Iterator[None]:
    """What every entry point does first (streams/cli.py), undone after the test."""
    saved = (logging.getLogRecordFactory(), sys.excepthook, threading.excepthook)
    install_log_redaction()
    try:
        yield
    finally:
        logging.setLogRecordFactory(saved[0])
        sys.excepthook, threading.excepthook = saved[1], saved[2]
        errors._installed = None


async def _text_columns_holding(database_url: str, needle: str) -> list[str]:
    """``schema.table.column`` of every text-like or jsonb column holding ``needle``."""
    conn = await asyncpg.connect(database_url)
    try:
        columns = await conn.fetch(
            "SELECT table_schema, table_name, column_name FROM information_schema.columns"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND data_type IN ('text', 'character varying', 'character', 'jsonb', 'json')"
        )
        hits = []
        for c in columns:
            if c["table_name"] == PROBE:
                continue
            found = await conn.fetchval(
                f'SELECT count(*) FROM "{c["table_schema"]}"."{c["table_name"]}"'
                f' WHERE "{c["column_name"]}"::text LIKE $1',
                f"%{needle}%",
            )
            if found:
                hits.append(f"{c['table_schema']}.{c['table_name']}.{c['column_name']}")
        return hits
    finally:
        await conn.close()


async def test_a_failed_timer_run_shows_no_row_value_anywhere(
    ctx: SliceContext, database_url: str, caplog: pytest.LogCaptureFixture, redaction: None
) -> None:
    caplog.set_level(logging.DEBUG)
    cases = {
        "leak-unique-raw": (f"INSERT INTO {PROBE} VALUES ($1, 'x', -2)", False),
        "leak-unique-translated": (f"INSERT INTO {PROBE} VALUES ($1, 'x', -2)", True),
        "leak-check-raw": (f"INSERT INTO {PROBE} VALUES ('other', $1, 5)", False),
        "leak-check-translated": (f"INSERT INTO {PROBE} VALUES ('other', $1, 5)", True),
    }
    for name, (statement, translated) in cases.items():
        ctx.registry.register(
            Schedule(
                name=name,
                interval=timedelta(hours=1),
                handler=Violate(ctx, statement, translated=translated),
                max_duration=timedelta(seconds=30),
                mode=Mode.CLUSTER_ONCE,
            )
        )
    errors = {}
    for name in cases:
        record = await run_manual(ctx, name)
        assert record.result == "failed", record
        errors[name] = record.error
    assert errors == {
        "leak-unique-raw": (
            "UniqueViolationError [23505] schema=public table=leak_probe constraint=leak_probe_pkey"
        ),
        "leak-unique-translated": (
            "InputRejected [23505]: UniqueViolationError [23505] schema=public"
            " table=leak_probe constraint=leak_probe_pkey"
        ),
        "leak-check-raw": (
            "CheckViolationError [23514] schema=public table=leak_probe"
            " constraint=leak_probe_n_negative"
        ),
        "leak-check-translated": (
            "InputRejected [23514]: CheckViolationError [23514] schema=public"
            " table=leak_probe constraint=leak_probe_n_negative"
        ),
    }

    timers = repr(timer_list(ctx))
    for name, error in errors.items():
        assert error in timers, name  # the error is shown, in its value-free form
    data = await status(ctx)
    places = {
        "/timers": timers,
        "/status?format=json": repr(data),
        "/status (HTML)": render_html(data, True, {}),
        "/metrics": generate_latest(ctx.runtime.metrics.registry).decode(),
        "log": caplog.text,
    }
    assert "timer_run_failed" in caplog.text and "Traceback" in caplog.text
    assert {where: MARKER in text for where, text in places.items()} == dict.fromkeys(places, False)
    assert await _text_columns_holding(database_url, MARKER) == []
    # The search does find what is stored: the slots of the failed runs, with their errors.
    assert await _text_columns_holding(database_url, "leak-unique-raw") != []
    assert await _text_columns_holding(database_url, "UniqueViolationError") != []

"""ops.workers on real PostgreSQL: heartbeats and the live workers of an app."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from db import workers as repo

pytestmark = pytest.mark.integration


async def test_worker_heartbeats_list_live_workers_of_one_app(pool: asyncpg.Pool) -> None:
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    async with pool.acquire() as conn:
        await repo.heartbeat(conn, "w1", "app", "http://a:1", t0)
        await repo.heartbeat(conn, "w2", "app", "http://b:2", t0 + timedelta(seconds=5))
        await repo.heartbeat(conn, "w3", "other", "http://c:3", t0)
        await repo.heartbeat(conn, "w1", "app", "http://a:1", t0 + timedelta(seconds=20))
        live = await repo.list_live(conn, "app", t0 + timedelta(seconds=10))
        assert [w.worker_id for w in live] == ["w1"]
        # A day later the old rows of the app are forgotten by the next heartbeat.
        await repo.heartbeat(conn, "w4", "app", "http://d:4", t0 + timedelta(days=2))
        everyone = await repo.list_live(conn, "app", t0 - timedelta(days=1))
        assert [w.worker_id for w in everyone] == ["w4"]

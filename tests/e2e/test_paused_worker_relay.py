"""A worker frozen (SIGSTOP) in the middle of a relay pass must not hold the others up, and
must not double anything when it is continued (SIGCONT).

Two real workers on the shared stack, as in test_paused_worker_dispatch.py. Worker A is frozen
while PostgreSQL shows it holding advisory locks on outbox lanes; a reschedule is then
produced for an event in one of A's lanes, and worker B must publish its new reminder, after
the rows A was holding, once PostgreSQL ends A's transaction
(DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS, 5 s here). After SIGCONT, the output topic must carry
one outbox record per reminder, in order per key.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from db.outbox import LANE_LOCK_SPACE
from devkit.loads.reminder_audit import DUE_TOPIC
from devkit.seed import seed_reminders
from devkit.stacks.pause import cont, process_state, stop_when
from devkit.stacks.worker_pair import (
    IDLE_IN_TX_TIMEOUT,
    ROWS,
    Pair,
    TopicWatch,
    drain_and_audit,
    input_report,
    poll,
    relay_holders,
    reschedule,
    session_report,
    started_pair,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pair(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[Pair]:
    with started_pair(module_database_url, kafka_bootstrap, module_topic_prefix, module_tmp) as p:
        yield p


@pytest.mark.timeout(360)
async def test_worker_frozen_mid_relay_pass_does_not_stop_the_other(pair: Pair) -> None:
    assert pair.a.proc is not None
    conn = await asyncpg.connect(pair.db)
    try:
        async with TopicWatch(pair.kafka, pair.prefix + DUE_TOPIC) as topic:
            start = datetime.now(UTC) - timedelta(minutes=5)
            assert await seed_reminders(pair.db, events=ROWS, offsets=[1], start=start) == ROWS
            backends = await stop_when(
                conn, pair.a.proc.pid, pair.pg_port, relay_holders, timeout=60
            )
            stopped_at = time.monotonic()
            lanes = sorted(
                r["objid"]
                for r in await conn.fetch(
                    "SELECT objid::int FROM pg_locks WHERE locktype = 'advisory' "
                    "AND classid = $2::oid AND pid = ANY($1::int[])",
                    backends,
                    LANE_LOCK_SPACE,
                )
            )
            key = await conn.fetchval(
                "SELECT key FROM ops.outbox WHERE lane = ANY($1::smallint[]) "
                "AND published_at IS NULL ORDER BY id LIMIT 1",
                lanes,
            )
            assert key is not None, f"A holds lanes {lanes} with nothing to publish"
            event_id = uuid.UUID(key)
            old_id = await conn.fetchval("SELECT max(id) FROM ops.outbox WHERE key = $1", key)
            count_at_stop = len(topic.records)
            new_start, partition = await reschedule(pair, conn, event_id)
            try:
                await poll(
                    conn,
                    "SELECT version FROM calendar.events WHERE event_id = $1",
                    event_id,
                    until=lambda v: v == 2,
                    timeout=IDLE_IN_TX_TIMEOUT + 40,
                )
                new_id = await poll(
                    conn,
                    "SELECT reminder_id::text FROM calendar.event_reminders "
                    "WHERE event_id = $1 AND due_at = $2",
                    event_id,
                    new_start,
                    until=lambda v: v is not None,
                    timeout=5,
                )
                # Same key, same lane as the rows A holds: B can publish it only after them.
                seen_at = await topic.wait_for(new_id, timeout=40)
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}; A holds lanes {lanes}; A's sessions: "
                    f"{await session_report(conn, backends)}; {await input_report(pair, partition)}"
                ) from None
            assert process_state(pair.a.proc.pid) in {"T", "t"}, "A was continued too early"
            published_while_frozen = len(topic.records) - count_at_stop
            print(
                f"\nA frozen holding lanes {lanes}; new reminder of event in lane published "
                f"{seen_at - stopped_at:.1f}s after the stop; {published_while_frozen} records "
                f"reached the topic meanwhile"
            )
            cont(pair.a.proc.pid)
            await drain_and_audit(pair, conn)
            # Per-key order: the reminder A was holding comes before the new one.
            firsts: dict[str, tuple[int, int]] = {}
            new_outbox_id = None
            for _, r in topic.records:
                if r.key != key.encode():
                    continue
                oid = dict(r.headers)["outbox-id"].decode()
                firsts.setdefault(oid, (r.partition, r.offset))
                if json.loads(r.value or b"{}")["ReminderId"] == new_id:
                    new_outbox_id = oid
            assert new_outbox_id is not None and str(old_id) in firsts, firsts
            assert firsts[str(old_id)] < firsts[new_outbox_id], firsts
    finally:
        cont(pair.a.proc.pid)
        await conn.close()

"""A worker frozen (SIGSTOP) in the middle of a dispatch batch must not hold the others up,
and must not double anything when it is continued (SIGCONT).

Two real workers on the shared stack. Worker A is frozen while PostgreSQL shows it inside
the batch (row locks on reminders, session ``idle in transaction``). Reschedules are then
produced for events A holds; worker B must apply them and publish the new reminders while A
is still frozen, which is only possible once PostgreSQL ends A's transaction
(DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS, set to 5 s here) and, for events on A's input
partitions, once B has taken those partitions over (A stops heartbeating;
BROKER_SESSION_TIMEOUT, set to 10 s here).
After SIGCONT, the output topic must carry one outbox record per reminder (re-publishes of
the same record, same ``outbox-id``, are at-least-once delivery and allowed).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from devkit.loads.reminder_audit import DUE_TOPIC
from devkit.seed import seed_reminders
from devkit.stacks.pause import cont, process_state, stop_when
from devkit.stacks.worker_pair import (
    IDLE_IN_TX_TIMEOUT,
    ROWS,
    Pair,
    TopicWatch,
    dispatch_holders,
    drain_and_audit,
    input_partition,
    input_report,
    nudge_report,
    owned_partitions,
    poll,
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
async def test_worker_frozen_mid_dispatch_batch_does_not_stop_the_other(pair: Pair) -> None:
    assert pair.a.proc is not None
    conn = await asyncpg.connect(pair.db)
    try:
        async with TopicWatch(pair.kafka, pair.prefix + DUE_TOPIC) as topic:
            start = datetime.now(UTC) - timedelta(minutes=5)
            assert await seed_reminders(pair.db, events=ROWS, offsets=[1], start=start) == ROWS
            backends = await stop_when(
                conn, pair.a.proc.pid, pair.pg_port, dispatch_holders, timeout=60
            )
            stopped_at = time.monotonic()
            # The batch A holds: reminder rows its session has locked.
            held = await conn.fetch(
                "SELECT r.reminder_id, r.event_id, r.due_at "
                "FROM pgrowlocks('calendar.event_reminders') l "
                "JOIN calendar.event_reminders r ON r.ctid = l.locked_row "
                "WHERE l.pids && $1::int[]",
                backends,
            )
            assert held, (
                f"A is frozen but holds no reminder rows: {await session_report(conn, backends)}"
            )
            sent_at_stop = await conn.fetchval(
                "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
            )
            # One held event per input partition. Those on B's partitions come first: B can
            # apply them once PostgreSQL has ended A's transaction (its locks block them until
            # then). Those on A's partitions B reads only after taking them over (A stopped
            # heartbeating: BROKER_SESSION_TIMEOUT).
            a_partitions = await owned_partitions(pair, "paused-a")
            assert a_partitions, "the group description shows no input partition for A"
            targets: dict[int, asyncpg.Record] = {}
            for row in sorted(held, key=lambda r: r["reminder_id"]):
                targets.setdefault(input_partition(row["event_id"]), row)
            new_starts: dict[int, datetime] = {}
            applied_after: dict[str, float] = {}
            for phase, parts in (
                ("B's partitions", sorted(set(targets) - a_partitions)),
                ("A's partitions (taken over)", sorted(set(targets) & a_partitions)),
            ):
                for p in parts:
                    new_starts[p], sent_to = await reschedule(pair, conn, targets[p]["event_id"])
                    assert sent_to == p
                ids = [targets[p]["event_id"] for p in parts]
                want = len(ids)
                try:
                    await poll(
                        conn,
                        "SELECT count(*) FROM calendar.events "
                        "WHERE event_id = ANY($1) AND version = 2",
                        ids,
                        until=lambda v: v == want,  # noqa: B023 (used at once)
                        timeout=IDLE_IN_TX_TIMEOUT + 40,
                    )
                except AssertionError:
                    applied = {
                        r["event_id"]
                        for r in await conn.fetch(
                            "SELECT event_id FROM calendar.events "
                            "WHERE event_id = ANY($1) AND version = 2",
                            ids,
                        )
                    }
                    missing = [p for p in parts if targets[p]["event_id"] not in applied]
                    raise AssertionError(
                        f"reschedules on {phase} {missing} (A had {sorted(a_partitions)}) not "
                        f"applied while A is frozen, after {IDLE_IN_TX_TIMEOUT + 40}s; "
                        f"A's sessions: {await session_report(conn, backends)}; "
                        f"{await input_report(pair, missing[0])}; "
                        f"{await nudge_report(pair, conn, missing[0], targets[missing[0]]['event_id'])}"
                    ) from None
                applied_after[phase] = time.monotonic() - stopped_at
            seen_at = 0.0
            for p, row in targets.items():
                new_id = await poll(
                    conn,
                    "SELECT reminder_id::text FROM calendar.event_reminders "
                    "WHERE event_id = $1 AND due_at = $2",
                    row["event_id"],
                    new_starts[p],
                    until=lambda v: v is not None,
                    timeout=5,
                )
                seen_at = max(seen_at, await topic.wait_for(new_id, timeout=40))
            assert process_state(pair.a.proc.pid) in {"T", "t"}, "A was continued too early"
            sent_while_frozen = (
                await conn.fetchval(
                    "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
                )
                - sent_at_stop
            )
            old_status = Counter(
                r["status"]
                for r in await conn.fetch(
                    "SELECT status FROM calendar.event_reminders WHERE reminder_id = ANY($1)",
                    [row["reminder_id"] for row in targets.values()],
                )
            )
            print(
                f"\nA frozen holding {len(held)} reminder rows (A had input partitions "
                f"{sorted(a_partitions)}); reschedules applied by B after "
                + ", ".join(f"{k}: {v:.1f}s" for k, v in applied_after.items())
                + f"; their new reminders all on the topic {seen_at - stopped_at:.1f}s after the "
                f"stop; B sent {sent_while_frozen} reminders meanwhile; the held old reminders "
                f"ended {dict(old_status)}"
            )
            assert sent_while_frozen > 0
            cont(pair.a.proc.pid)
            await drain_and_audit(pair, conn)
    finally:
        cont(pair.a.proc.pid)
        await conn.close()

"""Materialization rules on real PostgreSQL: create, reschedule, offsets removed, cascade, replay, stale."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from db.connector import Connection
from devkit.harness.calendar import apply, make_runtime, reminders
from devkit.messages.factories import T0, calendar_event
from devkit.wait import eventually
from streams.metrics import Metrics
from streams.slices.calendar.events import CalendarEventsApplier
from streams.tables.cache import KeyCache

pytestmark = pytest.mark.integration

START = T0 + timedelta(hours=2)


class DictTable(dict[str, Any]):
    """Stands in for the Faust table in-process (the real one is exercised by the e2e tests)."""

    name = "calendar-event-cache"


@pytest.fixture
def applier(database_url: str) -> CalendarEventsApplier:
    return CalendarEventsApplier(make_runtime(database_url))


async def test_create_materializes_one_pending_row_per_offset(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60, 15, 15])
    result = await apply(applier, e)
    assert result.applied == 1 and result.details is not None
    assert result.details.reminders_pending == 2
    assert result.details.earliest_due == START - timedelta(minutes=60)
    assert await reminders(pool, e["EventId"]) == [
        (60, START - timedelta(minutes=60), "Pending", None),
        (15, START - timedelta(minutes=15), "Pending", None),
    ]


async def test_reschedule_skips_old_pending_and_inserts_new(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    later = START + timedelta(days=1)
    await apply(applier, {**e, "Version": 2, "StartAt": later.isoformat()})
    assert await reminders(pool, e["EventId"]) == [
        (60, START - timedelta(minutes=60), "Skipped", "NoLongerScheduled"),
        (60, later - timedelta(minutes=60), "Pending", None),
    ]


async def test_sent_rows_stay_as_history_on_reschedule(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    await pool.execute(
        "UPDATE calendar.event_reminders SET status='Sent', sent_at=$1 WHERE event_id=$2::uuid",
        T0,
        e["EventId"],
    )
    later = START + timedelta(hours=3)
    await apply(applier, {**e, "Version": 2, "StartAt": later.isoformat()})
    rows = await reminders(pool, e["EventId"])
    assert [r[2] for r in rows] == ["Sent", "Pending"]


async def test_removed_offset_is_skipped_and_kept_offset_untouched(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60, 15])
    await apply(applier, e)
    await apply(applier, {**e, "Version": 2, "ReminderOffsetsMinutes": [15]})
    assert await reminders(pool, e["EventId"]) == [
        (60, START - timedelta(minutes=60), "Skipped", "NoLongerScheduled"),
        (15, START - timedelta(minutes=15), "Pending", None),
    ]


@pytest.mark.parametrize(
    ("status", "reason"), [("Cancelled", "EventCancelled"), ("Completed", "EventCompleted")]
)
async def test_closed_event_cascades_pending_to_skipped(
    applier: CalendarEventsApplier, pool: asyncpg.Pool, status: str, reason: str
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60, 15])
    await apply(applier, e)
    await apply(applier, {**e, "Version": 2, "Status": status})
    assert {(r[2], r[3]) for r in await reminders(pool, e["EventId"])} == {("Skipped", reason)}


async def test_replay_and_stale_version_create_nothing(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60], Version=5)
    await apply(applier, e)
    before = await reminders(pool, e["EventId"])
    replay = await apply(applier, e)
    stale = await apply(applier, {**e, "Version": 4, "Status": "Cancelled"})
    assert (replay.applied, replay.stale) == (0, 1)
    assert (stale.applied, stale.stale) == (0, 1)
    assert await reminders(pool, e["EventId"]) == before
    assert await pool.fetchval("SELECT version FROM calendar.events") == 5


async def test_offset_already_due_when_the_change_happened_is_not_materialized(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    # OccurredAt 09:00, StartAt 10:00: the 2-hour reminder (08:00) is already past.
    e = calendar_event(
        StartAt=T0 + timedelta(hours=1), OccurredAt=T0, ReminderOffsetsMinutes=[120, 30]
    )
    await apply(applier, e)
    assert [r[0] for r in await reminders(pool, e["EventId"])] == [30]


async def test_existing_overdue_pending_row_survives_an_unrelated_change(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    # Made while in the future; by the next change it is overdue but not yet dispatched.
    e = calendar_event(StartAt=T0 + timedelta(hours=1), OccurredAt=T0, ReminderOffsetsMinutes=[30])
    await apply(applier, e)
    later = (T0 + timedelta(minutes=45)).isoformat()
    await apply(applier, {**e, "Version": 2, "Kind": "Call", "OccurredAt": later})
    assert [r[2] for r in await reminders(pool, e["EventId"])] == ["Pending"]


async def test_rescheduled_back_reopens_the_skipped_row(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    await apply(applier, {**e, "Version": 2, "StartAt": (START + timedelta(hours=1)).isoformat()})
    await apply(applier, {**e, "Version": 3})
    rows = await reminders(pool, e["EventId"])
    assert [(r[1], r[2]) for r in rows] == [
        (START - timedelta(minutes=60), "Pending"),
        (START, "Skipped"),
    ]


async def test_a_reopened_row_starts_afresh_without_an_earlier_backoff(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    """A row that backed off as poison, was skipped (the event cancelled), then is wanted
    again (un-cancelled) is a new reminder: due at its DueAt, not after the old retry time."""
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE calendar.event_reminders SET attempts = 5, last_error_code = 'contract', "
            "next_attempt_at = $2 WHERE event_id = $1",
            e["EventId"],
            START + timedelta(days=1),
        )
    await apply(applier, {**e, "Version": 2, "Status": "Cancelled"})
    await apply(applier, {**e, "Version": 3})
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT status, attempts, next_attempt_at = '-infinity' AS no_retry, last_error_code "
            "FROM calendar.event_reminders WHERE event_id = $1",
            e["EventId"],
        )
    assert row is not None
    assert dict(row) == {
        "status": "Pending",
        "attempts": 0,
        "no_retry": True,
        "last_error_code": None,
    }


async def test_cache_answers_unchanged_states_without_changing_any_outcome(
    database_url: str, pool: asyncpg.Pool
) -> None:
    metrics = Metrics()
    table = DictTable()
    cached = CalendarEventsApplier(make_runtime(database_url), KeyCache(table, metrics.agents))  # type: ignore[arg-type]
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    first = await apply(cached, e)
    assert first.applied == 1 and table[e["EventId"]]["v"] == 1
    same_state = await apply(cached, {**e, "Version": 2})
    assert same_state.cache_skipped == 1 and same_state.applied == 0
    stale = await apply(cached, {**e, "Version": 1, "Status": "Cancelled"})
    assert stale.stale == 1
    changed = await apply(cached, {**e, "Version": 3, "Status": "Cancelled"})
    assert changed.applied == 1
    assert {r[2] for r in await reminders(pool, e["EventId"])} == {"Skipped"}


@pytest.mark.parametrize("cache_state", ["empty", "stale"])
async def test_empty_or_stale_cache_gives_the_same_rows_as_no_cache(
    database_url: str, pool: asyncpg.Pool, cache_state: str
) -> None:
    metrics = Metrics()
    table = DictTable()
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60, 15])
    history = [
        e,
        {**e, "Version": 2, "ReminderOffsetsMinutes": [15]},
        {**e, "Version": 3, "Status": "Cancelled"},
    ]
    plain = CalendarEventsApplier(make_runtime(database_url))
    for msg in history[:2]:
        await apply(plain, msg)
    if cache_state == "stale":
        # The cache lags behind PostgreSQL (e.g. a changelog write lost in a crash).
        from devkit.messages.factories import parsed
        from streams.domain.calendar import fingerprint

        table[e["EventId"]] = {"v": 1, "fp": fingerprint(parsed(e))}
    cached = CalendarEventsApplier(make_runtime(database_url), KeyCache(table, metrics.agents))  # type: ignore[arg-type]
    # Replays of everything, then the new state: outcome must equal the uncached path.
    for msg in history:
        await apply(cached, msg)
    rows = await reminders(pool, e["EventId"])
    assert [(r[0], r[2], r[3]) for r in rows] == [
        (60, "Skipped", "NoLongerScheduled"),
        (15, "Skipped", "EventCancelled"),
    ]
    assert await pool.fetchval("SELECT version FROM calendar.events") == 3


@pytest.mark.parametrize("order", ["in order", "newer first"])
async def test_the_stored_version_follows_an_unchanged_newer_state_and_the_cache_never_leads(
    database_url: str, pool: asyncpg.Pool, order: str
) -> None:
    table = DictTable()
    cached = CalendarEventsApplier(make_runtime(database_url), KeyCache(table, Metrics().agents))  # type: ignore[arg-type]
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    same_content = {**e, "Version": 2, "OccurredAt": (T0 + timedelta(minutes=5)).isoformat()}
    arrivals = [e, same_content] if order == "in order" else [same_content, e]
    for msg in arrivals:
        await apply(cached, msg)
    stored = await pool.fetchrow("SELECT version, occurred_at FROM calendar.events")
    assert stored["version"] == 2
    assert stored["occurred_at"] == T0 + timedelta(minutes=5)
    assert table[e["EventId"]]["v"] == 2  # the cache says what the database says
    assert [r[2] for r in await reminders(pool, e["EventId"])] == ["Pending"]
    # A later real change still applies on top.
    changed = await apply(cached, {**e, "Version": 3, "Status": "Cancelled"})
    assert changed.applied == 1


async def test_an_unchanged_state_older_than_the_database_teaches_the_cache_the_stored_state(
    database_url: str, pool: asyncpg.Pool
) -> None:
    plain = CalendarEventsApplier(make_runtime(database_url))
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(plain, {**e, "Version": 5, "Kind": "Call"})  # another worker got further
    table = DictTable()
    from devkit.messages.factories import parsed
    from streams.domain.calendar import fingerprint

    table[e["EventId"]] = {"v": 1, "fp": fingerprint(parsed(e))}  # a stale cache entry
    cached = CalendarEventsApplier(make_runtime(database_url), KeyCache(table, Metrics().agents))  # type: ignore[arg-type]
    result = await apply(cached, {**e, "Version": 2})  # same content as the stale entry
    assert result.stale == 1 and result.cache_skipped == 0
    # The database said stale: the cache now holds what is stored (v5, the Call's content).
    assert table[e["EventId"]] == {"v": 5, "fp": fingerprint(parsed({**e, "Kind": "Call"}))}
    assert await pool.fetchval("SELECT version FROM calendar.events") == 5


class WriterProxy:
    """Stands in front of the real writer: same keys and fingerprints."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def key(self, message: Any) -> str:
        return str(self.inner.key(message))

    def fingerprint(self, message: Any) -> str:
        return str(self.inner.fingerprint(message))


class GatedWriter(WriterProxy):
    """The real writer; each call waits at its own gate before writing (calls in order)."""

    def __init__(self, inner: Any, gates: int) -> None:
        super().__init__(inner)
        self.gates = [asyncio.Event() for _ in range(gates)]
        self.arrived = [asyncio.Event() for _ in range(gates)]

    async def write(
        self, conn: Connection, changed: Any, unchanged: Any, now: Any, origins: Any, fps: Any
    ) -> Any:
        n, self.calls = self.calls, self.calls + 1
        self.arrived[n].set()
        await self.gates[n].wait()
        return await self.inner.write(conn, changed, unchanged, now, origins, fps)


async def test_a_batch_does_not_trust_the_cache_about_a_key_another_batch_in_flight_writes(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """Two batches in flight (the consumer's pipeline): the second must not call a state
    "unchanged" from a cache entry that the first is about to make untrue. It waits for the
    first, and then reads what the first made true."""
    table = DictTable()
    applier = CalendarEventsApplier(make_runtime(database_url), KeyCache(table, Metrics().agents))  # type: ignore[arg-type]
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60], Kind="Meeting")
    await apply(applier, e)  # cached: v1, content "Meeting"
    gated = GatedWriter(applier.writer, 2)
    applier.writer = gated
    gated.gates[1].set()
    first = asyncio.create_task(apply(applier, {**e, "Version": 2, "Kind": "Call"}))
    await gated.arrived[0].wait()
    # Same content as the cached v1, newer Version: "unchanged" by the cache alone.
    second = asyncio.create_task(apply(applier, {**e, "Version": 3}))
    await eventually(
        lambda: applier.waits_for_keys_in_flight, until=bool, timeout=10, what="second parked"
    )
    assert gated.calls == 1  # the second has not read the cache nor written
    gated.gates[0].set()
    assert (await first).applied == 1  # v2 "Call" committed
    result = await second
    assert result.applied == 1 and result.cache_skipped == 0
    row = await pool.fetchrow("SELECT version, kind FROM calendar.events")
    assert (row["version"], row["kind"]) == (3, "Meeting")
    assert table[e["EventId"]]["v"] == 3


async def test_batches_in_flight_with_other_keys_do_not_wait_for_each_other(
    database_url: str, pool: asyncpg.Pool
) -> None:
    applier = CalendarEventsApplier(make_runtime(database_url))
    held = HeldWriter(applier.writer)
    applier.writer = held
    a, b = calendar_event(StartAt=START), calendar_event(StartAt=START)
    first = asyncio.create_task(apply(applier, a))
    await held.wrote.wait()  # open, uncommitted
    assert (await apply(applier, b)).applied == 1  # written and committed meanwhile
    assert applier.waits_for_keys_in_flight == 0
    held.release.set()
    assert (await first).applied == 1


class HeldWriter(WriterProxy):
    """The real writer; the first call writes, then holds its transaction open (uncommitted)
    until released."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.wrote = asyncio.Event()
        self.release = asyncio.Event()

    async def write(
        self, conn: Connection, changed: Any, unchanged: Any, now: Any, origins: Any, fps: Any
    ) -> Any:
        first, self.calls = self.calls == 0, self.calls + 1
        written = await self.inner.write(conn, changed, unchanged, now, origins, fps)
        if first:
            self.wrote.set()
            await self.release.wait()
        return written


async def test_a_batch_in_flight_never_leaves_the_reminders_of_the_state_before_it_pending(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """Two batches in flight (the consumer's pipeline) with two states of one event: the
    second is written only once the first has committed. Written while the first was still
    open, its statement could not see the first's reminders (they were not committed when
    it began) and the reminder of the old start time stayed Pending - sent at the old time."""
    applier = CalendarEventsApplier(make_runtime(database_url))
    held = HeldWriter(applier.writer)
    applier.writer = held
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    later = START + timedelta(days=1)
    first = asyncio.create_task(apply(applier, e))
    await held.wrote.wait()  # v1 and its reminder written, not committed
    second = asyncio.create_task(apply(applier, {**e, "Version": 2, "StartAt": later.isoformat()}))

    async def second_waits() -> bool:
        # Either parked by the applier behind the first batch, or (without that) blocked in
        # PostgreSQL on the first's uncommitted event row.
        if applier.waits_for_keys_in_flight:
            return True
        return bool(
            await pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )

    await eventually(second_waits, until=bool, timeout=10, what="second batch waiting")
    held.release.set()
    assert (await first).applied == 1
    assert (await second).applied == 1
    assert await reminders(pool, e["EventId"]) == [
        (60, START - timedelta(minutes=60), "Skipped", "NoLongerScheduled"),
        (60, later - timedelta(minutes=60), "Pending", None),
    ]

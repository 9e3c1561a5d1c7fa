"""What the input pipeline does with database errors, on real PostgreSQL: errors that say the
database is unwell retry and block (the message is applied once it recovers, never
dead-lettered); errors that say the message is bad dead-letter that message only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from devkit.harness.calendar import make_runtime
from devkit.harness.input_events import Ev, Msg, RecordingDlq
from devkit.messages.factories import calendar_event, encode
from streams.contracts import CALENDAR_EVENTS
from streams.input.consumer import ContractConsumer
from streams.runtime import Runtime
from streams.slices.calendar.events import CalendarEventsApplier

pytestmark = pytest.mark.integration


class Harness:
    def __init__(self, runtime: Runtime, pool: asyncpg.Pool) -> None:
        self.runtime = runtime
        self.pool = pool
        self.dlq = RecordingDlq()
        self.outcomes: list[tuple[int, str, str | None]] = []
        self.retries = 0
        self.on_retry: Any = None
        self.consumer = ContractConsumer(
            CALENDAR_EVENTS,
            CalendarEventsApplier(runtime),
            self.dlq,  # type: ignore[arg-type]
            runtime.metrics.agents,
            sleep=self._sleep,
            on_outcome=lambda ev, outcome, reason: self.outcomes.append(
                (ev.message.offset, outcome, reason)
            ),
        )

    async def _sleep(self, _: float) -> None:
        self.retries += 1
        if self.on_retry is not None:
            await self.on_retry(self.retries)

    async def handle(self, *messages: dict[str, Any]) -> None:
        events = [Ev(Msg(encode(m), offset=i)) for i, m in enumerate(messages)]
        await self.consumer.handle(events)  # type: ignore[arg-type]


@pytest.fixture
async def harness(database_url: str, pool: asyncpg.Pool) -> AsyncIterator[Harness]:
    runtime = make_runtime(database_url)
    try:
        yield Harness(runtime, pool)
    finally:
        await runtime.close()


async def raise_on_insert(
    pool: asyncpg.Pool, sqlstate: str, *, only_kind: str | None = None
) -> None:
    condition = f"NEW.kind = '{only_kind}'" if only_kind else "true"
    await pool.execute(
        f"""
        CREATE OR REPLACE FUNCTION calendar.fail_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF {condition} THEN
                RAISE EXCEPTION 'injected failure' USING ERRCODE = '{sqlstate}';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER fail_insert BEFORE INSERT OR UPDATE ON calendar.events
            FOR EACH ROW EXECUTE FUNCTION calendar.fail_insert();
        """
    )


async def heal(pool: asyncpg.Pool) -> None:
    await pool.execute("DROP TRIGGER IF EXISTS fail_insert ON calendar.events")


@pytest.mark.parametrize(
    "sqlstate",
    [
        "53100",  # disk full
        "53200",  # out of memory
        "25006",  # read-only transaction (after a failover)
        "55P03",  # lock not available
        "42P01",  # undefined table
        "42501",  # insufficient privilege
        "57P01",  # admin shutdown
        "XX000",  # internal error
        "P0001",  # a plain RAISE: not known to be about the data, so never dead-lettered
    ],
)
async def test_an_unwell_database_retries_and_blocks_then_applies_the_message(
    harness: Harness, sqlstate: str
) -> None:
    await raise_on_insert(harness.pool, sqlstate)

    async def recover(attempt: int) -> None:
        if attempt == 3:
            await heal(harness.pool)

    harness.on_retry = recover
    msg = calendar_event()
    await harness.handle(msg)
    assert harness.retries == 3  # blocked until the database recovered
    assert harness.dlq.sent == []
    assert harness.outcomes == [(0, "applied", None)]
    stored = await harness.pool.fetchval(
        "SELECT count(*) FROM calendar.events WHERE event_id = $1::uuid", msg["EventId"]
    )
    assert stored == 1
    retried = harness.runtime.metrics.registry.get_sample_value(
        "reminders_stream_infrastructure_retries_total", {"topic": "pin.calendar.events.v1"}
    )
    assert retried == 3


@pytest.mark.parametrize(
    "sqlstate",
    [
        "22P02",  # invalid text representation
        "22003",  # numeric value out of range
        "23505",  # unique violation
        "23514",  # check violation
        "54000",  # program limit exceeded
    ],
)
async def test_a_message_the_database_rejects_goes_to_the_dlq_and_the_rest_of_the_batch_applies(
    harness: Harness, sqlstate: str
) -> None:
    await raise_on_insert(harness.pool, sqlstate, only_kind="Poison")
    good_before, poison, good_after = (
        calendar_event(),
        calendar_event(Kind="Poison"),
        calendar_event(),
    )
    await harness.handle(good_before, poison, good_after)
    assert harness.retries == 0
    assert [o[:2] for o in harness.outcomes] == [(0, "applied"), (1, "dlq"), (2, "applied")]
    [dead] = harness.dlq.sent
    headers = dict(dead["headers"])
    assert headers["dlq-error-kind"] == b"processing"
    assert headers["dlq-reason"] == f"database rejected the message (SQLSTATE {sqlstate})".encode()
    assert dead["value"] == encode(poison)  # the original bytes: nothing lost
    ids = {r["event_id"] for r in await harness.pool.fetch("SELECT event_id FROM calendar.events")}
    assert {str(i) for i in ids} == {good_before["EventId"], good_after["EventId"]}


async def test_a_code_error_while_applying_dead_letters_that_message_only(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import streams.slices.calendar.events as agent

    real = agent.wanted_reminders

    def explode_on_poison(event: Any) -> Any:
        if event.kind == "Poison":
            raise IsADirectoryError("a bug, not a database problem")
        return real(event)

    monkeypatch.setattr(agent, "wanted_reminders", explode_on_poison)
    msgs = [calendar_event(), calendar_event(Kind="Poison"), calendar_event()]
    await harness.handle(*msgs)
    assert harness.retries == 0  # an OSError subclass from our code is not "database down"
    assert [o[:2] for o in sorted(harness.outcomes)] == [(0, "applied"), (1, "dlq"), (2, "applied")]
    assert dict(harness.dlq.sent[0]["headers"])["dlq-reason"] == (
        b"processing failed: IsADirectoryError"
    )


async def test_the_same_instant_written_in_another_offset_is_the_same_reminder(
    harness: Harness,
) -> None:
    v1 = calendar_event(StartAt="2026-12-01T12:00:00Z", ReminderOffsetsMinutes=[30])
    v2 = {**v1, "Version": 2, "StartAt": "2026-12-01T13:00:00+01:00", "Kind": "Call"}
    await harness.handle(v1)
    await harness.pool.execute(
        "UPDATE calendar.event_reminders SET status = 'Sent', sent_at = now()"
    )
    await harness.handle(v2)
    assert [o[1] for o in harness.outcomes] == ["applied", "applied"]
    rows = await harness.pool.fetch(
        "SELECT status FROM calendar.event_reminders WHERE event_id = $1::uuid", v1["EventId"]
    )
    assert [r["status"] for r in rows] == ["Sent"]  # not a second, unsent reminder
    assert harness.dlq.sent == []


async def test_every_message_gets_exactly_one_outcome(harness: Harness) -> None:
    v1 = calendar_event(Version=1)
    v2 = {**v1, "Version": 2, "Kind": "Call"}
    stale = {**v1, "Version": 0}
    bad_tz = calendar_event(TimeZone="America")
    long_tz = calendar_event(TimeZone="Z" * 300)
    await harness.handle(v1, v2, stale, bad_tz, long_tz)
    assert sorted(o[:2] for o in harness.outcomes) == [
        (0, "noop"),  # superseded by v2 in the same batch
        (1, "applied"),
        (2, "noop"),
        (3, "dlq"),
        (4, "dlq"),
    ]

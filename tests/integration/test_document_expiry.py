"""DocumentExpiryReminderJob on real PostgreSQL: one test per row of the seed's test table
("Тесты", seed 001), in the seed's order, through the real run handler and per-owner worker
(inline fan-out; the Kafka fan-out has its own tests)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from devkit.harness.profile import (
    CIPHER,
    MASK,
    SLOT,
    TODAY,
    Harness,
    items,
    marks,
    person_document,
    reminder_events,
)
from devkit.wait import eventually
from streams import logs
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS, decode
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)


@pytest.fixture
async def h(database_url: str) -> AsyncIterator[Harness]:
    harness = Harness(database_url)
    yield harness
    await harness.close()


async def wait_for_lock_waiters(pool: asyncpg.Pool, n: int, timeout: float = 10.0) -> None:
    """Return once ``n`` sessions of this database wait for a lock (seen in pg_stat_activity)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    await eventually(
        lambda: pool.fetchval(query),
        timeout=timeout,
        what=f"{n} sessions waiting for a lock",
        until=lambda waiting: waiting >= n,
        interval=0.01,
    )


# 1. Empty batch
async def test_empty_batch(h: Harness, pool: asyncpg.Pool) -> None:
    """No Active document with ExpiresAt in the window: a no-op success, no markers or events."""
    await h.apply(
        person_document(DaysLeft=31),  # beyond the largest threshold
        person_document(DaysLeft=3, Status="Archived"),
        person_document(DaysLeft=3, IsDeleted=True),
        person_document(DaysLeft=-91),  # expired before the retention horizon
    )
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (result.owners_total, result.reminders_sent, result.owners_notified) == (0, 0, 0)
    assert (result.documents_scanned, result.batches, result.backlog) == (0, 1, 0)
    assert await marks(pool) == set() and await reminder_events(pool) == []


# 2. Threshold crossing
async def test_threshold_crossing(h: Harness, pool: asyncpg.Pool) -> None:
    """ExpiresAt - AsOf.Date = 7 with threshold 7 and no marker → marker (doc, 7), one event to
    the owner, ThresholdDays = 7."""
    doc = person_document(DaysLeft=7)
    did, owner = doc["DocumentId"], doc["OwnerUserId"]
    await h.apply(doc)
    # 23 days earlier the document crossed 30 (and got that reminder): (doc, 7) is unmarked.
    await h.run().run_once(RunContext.at(SLOT - 23 * DAY, clock=h.runtime.clock))
    assert await marks(pool) == {(did, 30)}
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (result.reminders_sent, result.owners_notified) == (1, 1)
    assert await marks(pool) == {(did, 30), (did, 7)}
    first, event = await reminder_events(pool)
    assert items([first]) == {(did, 30, 30)}
    assert event["_key"] == owner and event["OwnerUserId"] == owner
    assert event["RemindedAt"] == SLOT.isoformat()
    assert event["Documents"] == [
        {
            "DocumentId": did,
            "Type": "InternationalPassport",
            "NumberMask": MASK,
            "ExpiresAt": (TODAY + 7 * DAY).isoformat(),
            "ThresholdDays": 7,
            "DaysLeft": 7,
        }
    ]
    assert event["_headers"]["correlation-id"] == result.run_id
    assert event["_headers"]["aggregate-type"] == "Profile"
    assert event["_headers"]["work-id"] == f"document-expiry:{owner}:2026-06-10T00:30:00Z"


# 3. Expiry date reached
async def test_expiry_date_reached(h: Harness, pool: asyncpg.Pool) -> None:
    """ExpiresAt <= AsOf.Date → threshold 0, DaysLeft <= 0, the expiry reminder once."""
    gone = person_document(DaysLeft=-3)
    today = person_document(DaysLeft=0)
    await h.apply(gone, today)
    await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert items(await reminder_events(pool)) == {
        (gone["DocumentId"], 0, -3),
        (today["DocumentId"], 0, 0),
    }
    for day in (SLOT, SLOT + DAY, SLOT + 30 * DAY):
        result = await h.run().run_once(RunContext.at(day, clock=h.runtime.clock))
        assert result.reminders_sent == 0
    assert len(await reminder_events(pool)) == 2


# 4. Fresh, almost expired
async def test_fresh_almost_expired(h: Harness, pool: asyncpg.Pool) -> None:
    """DaysLeft = 5: thresholds 30 and 7 marked, only t* = 7 sent (no spam for every window)."""
    doc = person_document(DaysLeft=5)
    await h.apply(doc)
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    did = doc["DocumentId"]
    assert await marks(pool) == {(did, 30), (did, 7)}
    assert items(await reminder_events(pool)) == {(did, 7, 5)}
    assert (result.reminders_sent, result.skipped_already_marked) == (1, 0)


# 5. Idempotency / restart
async def test_idempotency_restart(h: Harness, pool: asyncpg.Pool, database_url: str) -> None:
    """A repeated run over the same data inserts no marker and sends no event."""
    docs = [person_document(DaysLeft=d) for d in (30, 6, 1, -2)]
    await h.apply(*docs)
    first = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert first.reminders_sent == 4
    before_marks, before_events = await marks(pool), await reminder_events(pool)
    # A restarted worker: a new process (runtime, pool, handler), nothing carried over.
    restarted = Harness(database_url)
    try:
        again = await restarted.run().run_once(RunContext.at(SLOT, clock=restarted.runtime.clock))
        later = await restarted.run().run_once(
            RunContext.at(SLOT + timedelta(hours=2), clock=restarted.runtime.clock)
        )
    finally:
        await restarted.close()
    for result in (again, later):
        assert (result.reminders_sent, result.owners_notified) == (0, 0)
        assert result.skipped_already_marked == 1 + 2 + 3 + 4  # every crossed threshold
    assert await marks(pool) == before_marks and await reminder_events(pool) == before_events


# 6. Parallel instances
async def test_parallel_instances(pool: asyncpg.Pool, database_url: str) -> None:
    """Two workers on one (document, threshold) → exactly one marker and one event (DO NOTHING).

    The two transactions are made to overlap for real. The claim statement inserts its
    markers, then its outbox rows; a test trigger makes each outbox insert wait for an
    advisory lock a third session holds, so A waits there with its markers inserted; B's
    insert of the same markers then waits for A. When A commits, B's insert does nothing and
    B sends nothing."""
    a = Harness(database_url, db_lock_timeout_seconds=60)
    b = Harness(database_url, db_lock_timeout_seconds=60)
    doc = person_document(DaysLeft=7)
    await a.apply(doc)
    await pool.execute(
        """
        CREATE FUNCTION ops.wait_for_test_gate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(4242);
            RETURN NEW;
        END $$;
        CREATE TRIGGER test_gate BEFORE INSERT ON ops.outbox
            FOR EACH ROW EXECUTE FUNCTION ops.wait_for_test_gate();
        """
    )
    gate = await pool.acquire()
    try:
        await gate.execute("SELECT pg_advisory_lock(4242)")
        run_a = asyncio.create_task(a.run().run_once(RunContext.at(SLOT, clock=a.runtime.clock)))
        await wait_for_lock_waiters(pool, 1)
        run_b = asyncio.create_task(b.run().run_once(RunContext.at(SLOT, clock=b.runtime.clock)))
        await wait_for_lock_waiters(pool, 2)
        await gate.execute("SELECT pg_advisory_unlock(4242)")
        ra, rb = await asyncio.gather(run_a, run_b)
    finally:
        await pool.release(gate)
        await a.close()
        await b.close()
    assert (ra.reminders_sent, rb.reminders_sent) == (1, 0)
    rows = await pool.fetch(
        "SELECT threshold_days, count(*) AS n FROM profile.document_expiry_reminders "
        "GROUP BY threshold_days ORDER BY 1"
    )
    assert [(r["threshold_days"], r["n"]) for r in rows] == [(7, 1), (30, 1)]
    assert items(await reminder_events(pool)) == {(doc["DocumentId"], 7, 7)}


# 7. Grouping
async def test_grouping(h: Harness, pool: asyncpg.Pool) -> None:
    """An owner with 3 documents in the window → one event listing 3 ExpiringDocumentItems."""
    owner = str(uuid.uuid4())
    docs = [person_document(OwnerUserId=owner, DaysLeft=d) for d in (20, 5, -1)]
    other = person_document(OwnerUserId=owner, DaysLeft=45)  # not in the window
    await h.apply(*docs, other)
    # Batches of 2 documents: the owner shows up in two of them and is still handed out once.
    result = await h.run(batch_size=2).run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    [event] = await reminder_events(pool)
    assert event["_key"] == owner and len(event["Documents"]) == 3
    assert items([event]) == {
        (docs[0]["DocumentId"], 30, 20),
        (docs[1]["DocumentId"], 7, 5),
        (docs[2]["DocumentId"], 0, -1),
    }
    assert (result.owners_total, result.owners_notified, result.batches) == (1, 1, 2)


# 8. Read-only / no PII
async def test_read_only_no_pii(
    h: Harness, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """person_documents is not changed; PayloadCipher and keys are never read; no document
    value in the logs or the event beyond Type / NumberMask / ExpiresAt."""
    caplog.set_level(logging.DEBUG)
    owner = str(uuid.uuid4())
    docs = [person_document(OwnerUserId=owner, DaysLeft=d, Type="DriverLicense") for d in (5, 0)]
    await h.apply(*docs)
    snapshot = "SELECT xmin::text AS x, d.* FROM profile.person_documents d ORDER BY document_id"
    before = [dict(r) for r in await pool.fetch(snapshot)]
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert result.reminders_sent == 2
    # Not one row written (xmin would change), nothing stored that could hold the cipher.
    assert [dict(r) for r in await pool.fetch(snapshot)] == before
    columns = {
        r["column_name"]
        for r in await pool.fetch(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = 'profile' AND table_name = 'person_documents'"
        )
    }
    assert columns == {
        "document_id", "owner_user_id", "person_id", "type", "number_mask", "expires_at",
        "status", "is_deleted", "version", "occurred_at", "updated_at",
        "fingerprint",  # a digest of the open columns above (0010), for the applier
    }  # fmt: skip
    dumped = await pool.fetchval(
        "SELECT string_agg(t::text, ' ') FROM (SELECT * FROM profile.person_documents) t"
    )
    assert CIPHER not in dumped
    # Logs: identifiers only, and the seed's lines are there.
    assert CIPHER not in caplog.text and MASK not in caplog.text
    for line in ("cycle_started", "batch_selected", "reminder_queued", "cycle_completed"):
        assert f"action={line}" in caplog.text
    queued = [r.getMessage() for r in caplog.records if "action=reminder_queued" in r.getMessage()]
    # One line per owner (its event), each document as DocumentId:Type:ThresholdDays:DaysLeft.
    [line] = queued
    assert f"owner_user_id={owner}" in line and "count=2" in line
    assert f"{docs[0]['DocumentId']}:DriverLicense:7:5" in line
    assert f"{docs[1]['DocumentId']}:DriverLicense:0:0" in line
    # At DEBUG, the seed's per-document line; every record as a JSON line holds no value.
    as_json = [json.loads(logs.JsonFormatter().format(r)) for r in caplog.records]
    per_document = [x for x in as_json if x["action"] == "reminder_document_queued"]
    assert sorted(
        (x["document_id"], x["type"], x["threshold_days"], x["days_left"]) for x in per_document
    ) == sorted(
        [
            (docs[0]["DocumentId"], "DriverLicense", 7, 5),
            (docs[1]["DocumentId"], "DriverLicense", 0, 0),
        ]
    )
    assert all(x["owner_user_id"] == owner and x["run_id"] == result.run_id for x in per_document)
    assert not any(CIPHER in str(x) or MASK in str(x) for x in as_json)
    # The event: the contract's fields only; the cipher and PersonId are nowhere in it.
    [row] = await pool.fetch("SELECT payload FROM ops.outbox")
    assert CIPHER not in row["payload"] and docs[0]["PersonId"] not in row["payload"]
    event = decode(DOCUMENT_EXPIRY_REMINDERS, row["payload"].encode())
    payload = event.model_dump(by_alias=True, mode="json")
    assert set(payload) == {"ContractVersion", "OwnerUserId", "RemindedAt", "Documents"}
    assert all(
        set(d) == {"DocumentId", "Type", "NumberMask", "ExpiresAt", "ThresholdDays", "DaysLeft"}
        for d in payload["Documents"]
    )


# 9. Open-ended document
async def test_open_ended_document(h: Harness, pool: asyncpg.Pool) -> None:
    """ExpiresAt = null (Russian passport, INN): out of the scan, no reminders."""
    await h.apply(
        person_document(ExpiresAt=None, Type="RussianPassport"),
        person_document(ExpiresAt=None, Type="Inn"),
    )
    for day in (SLOT, SLOT + 400 * DAY):
        result = await h.run().run_once(RunContext.at(day, clock=h.runtime.clock))
        assert (result.documents_scanned, result.reminders_sent, result.backlog) == (0, 0, 0)
    assert await marks(pool) == set() and await reminder_events(pool) == []


# 10. Prune
async def test_prune(h: Harness, pool: asyncpg.Pool) -> None:
    """Markers with ExpiresAt < AsOf.Date - 90 days are deleted; live windows are untouched."""
    old = person_document(DaysLeft=-91)  # expired 91 days before SLOT
    edge = person_document(DaysLeft=-90)  # exactly on the horizon: kept
    live = person_document(DaysLeft=5)
    await h.apply(old, edge, live)
    await h.run().run_once(
        RunContext.at(SLOT - 10 * DAY, clock=h.runtime.clock)
    )  # all three were in the window then
    assert len(await marks(pool)) == 4 + 4 + 1  # live: 15 days left then → only 30
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert result.pruned == 4
    kept = await marks(pool)
    assert {d for d, _ in kept} == {edge["DocumentId"], live["DocumentId"]}
    assert {t for d, t in kept if d == live["DocumentId"]} == {30, 7}
    assert result.reminders_sent == 1  # live crossed 7; the pruned one is out of the scan


# 11. Threshold added to the config
async def test_threshold_added(h: Harness, pool: asyncpg.Pool) -> None:
    """A new threshold (14) fires for documents not yet marked for it; thresholds already
    passed and marked are not reminded again."""
    x, y = person_document(DaysLeft=10), person_document(DaysLeft=5)
    await h.apply(x, y)
    await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    first = items(await reminder_events(pool))
    assert first == {(x["DocumentId"], 30, 10), (y["DocumentId"], 7, 5)}
    result = await h.run(thresholds=(30, 14, 7, 1, 0)).run_once(
        RunContext.at(SLOT + DAY, clock=h.runtime.clock)
    )
    assert items(await reminder_events(pool)) - first == {
        (x["DocumentId"], 14, 9),
        (y["DocumentId"], 14, 4),
    }
    assert result.reminders_sent == 2
    assert await marks(pool) == {
        (x["DocumentId"], 30), (x["DocumentId"], 14),
        (y["DocumentId"], 30), (y["DocumentId"], 14), (y["DocumentId"], 7),
    }  # fmt: skip


# 12. Threshold removed from the config
async def test_threshold_removed(h: Harness, pool: asyncpg.Pool) -> None:
    """Markers of a removed threshold stay (dedupe holds); no new reminder for it."""
    marked, fresh = person_document(DaysLeft=5), person_document(DaysLeft=12)
    await h.apply(marked)
    await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert await marks(pool) == {(marked["DocumentId"], 30), (marked["DocumentId"], 7)}
    await h.apply(fresh)
    without_7 = (30, 1, 0)
    result = await h.run(thresholds=without_7).run_once(
        RunContext.at(SLOT + 6 * DAY, clock=h.runtime.clock)
    )  # fresh: 6 days left
    assert (marked["DocumentId"], 7) in await marks(pool)
    assert not any(t == 7 for _, t in await marks(pool) - {(marked["DocumentId"], 7)})
    # marked: 30 and 7 done, DaysLeft -1 now crosses 1 and 0 → t* = 0; fresh: 30 only.
    assert items(await reminder_events(pool)) - {(marked["DocumentId"], 7, 5)} == {
        (marked["DocumentId"], 0, -1),
        (fresh["DocumentId"], 30, 6),
    }
    assert result.reminders_sent == 2


# 13. Document renewal
async def test_document_renewal(h: Harness, pool: asyncpg.Pool) -> None:
    """ExpiresAt moved into the future before the next run → out of the window, no new
    reminders; the old markers do not get in the way (dedupe by (doc, threshold))."""
    doc = person_document(DaysLeft=5)
    await h.apply(doc)
    await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    renewed = TODAY + 400 * DAY
    await h.apply({**doc, "Version": 2, "ExpiresAt": renewed.isoformat()})
    for day in (SLOT + DAY, SLOT + 30 * DAY):
        assert (
            await h.run().run_once(RunContext.at(day, clock=h.runtime.clock))
        ).reminders_sent == 0
    did = doc["DocumentId"]
    assert await marks(pool) == {(did, 30), (did, 7)}
    # Once the old markers' ExpiresAt copy is past the retention horizon they are pruned,
    # and the renewed document gets its reminders again when it nears its new date.
    assert (
        await h.run().run_once(RunContext.at(SLOT + 100 * DAY, clock=h.runtime.clock))
    ).pruned == 2
    result = await h.run().run_once(RunContext.at(SLOT + 371 * DAY, clock=h.runtime.clock))
    assert items(await reminder_events(pool)) - {(did, 7, 5)} == {(did, 30, 29)}
    assert result.reminders_sent == 1


# 14. Cancellation
async def test_cancellation(h: Harness, pool: asyncpg.Pool, database_url: str) -> None:
    """Stopped mid-run → the owner's transaction is committed or rolled back whole (graceful
    stop): never markers without the event, or the event without its markers."""
    first, second, third = (person_document(DaysLeft=d) for d in (1, 3, 5))
    await h.apply(first, second, third)
    blocker = await pool.acquire()
    try:
        tx = blocker.transaction()
        await tx.start()
        # An uncommitted marker of the second owner's document: its transaction will wait here.
        await blocker.execute(
            "INSERT INTO profile.document_expiry_reminders (id, document_id, owner_user_id, type, "
            "threshold_days, expires_at, reminded_at) VALUES (gen_random_uuid(), $1, $2, 'X', 30, $3, $4)",
            uuid.UUID(second["DocumentId"]),
            uuid.UUID(second["OwnerUserId"]),
            TODAY + 3 * DAY,
            SLOT,
        )
        # One document per batch: each owner is its own transaction, in ExpiresAt order.
        run = asyncio.create_task(
            h.run(batch_size=1).run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        )
        await wait_for_lock_waiters(pool, 1)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await tx.rollback()
    finally:
        await pool.release(blocker)
    # First owner: whole (markers and event); second: nothing at all; third: not reached.
    assert await marks(pool) == {(first["DocumentId"], t) for t in (30, 7, 1)}
    assert items(await reminder_events(pool)) == {(first["DocumentId"], 1, 1)}
    # The next run picks up exactly what was left.
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert result.reminders_sent == 2
    assert items(await reminder_events(pool)) == {
        (first["DocumentId"], 1, 1),
        (second["DocumentId"], 7, 3),
        (third["DocumentId"], 7, 5),
    }

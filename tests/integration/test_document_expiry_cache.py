"""The per-owner marks cache in front of the ledger: empty, warm, lost, stale and lying caches
give exactly the reminders the ledger alone gives; a verified cache saves statements."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any
from unittest.mock import MagicMock

import asyncpg
import pytest

from devkit.database import create_database, drop_database
from devkit.harness.profile import (
    SLOT,
    TODAY,
    Harness,
    MemoryTable,
    items,
    marks,
    owners_work,
    person_document,
    reminder_events,
)
from streams.domain.profile import encode_marks
from streams.input.consumer import Decoded
from streams.slices.profile.work import RunOrder
from streams.timers.context import RunContext
from tests.conftest import DATABASE_URL

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)
DAYS = 14


@pytest.fixture
async def reference_url(template_database: str) -> AsyncIterator[str]:
    """A second fresh database: the same documents without a cache, for comparison."""
    name = f"r_{uuid.uuid4().hex[:12]}"
    url = await create_database(DATABASE_URL, name, template=template_database, timeout=10)
    try:
        yield url
    finally:
        await drop_database(DATABASE_URL, name, timeout=10)


def documents(seed: int, owners: int = 25) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(owners):
        owner = str(uuid.uuid4())
        for _ in range(rnd.randint(1, 3)):
            out.append(person_document(OwnerUserId=owner, DaysLeft=rnd.randint(-4, 40)))
    return out


CacheChange = Callable[[int, MemoryTable], None]


async def simulate(
    cached: Harness, reference: Harness, docs: list[dict[str, Any]], change: CacheChange
) -> list[set[tuple[str, int, int]]]:
    """Daily runs over DAYS days on both databases; ``change(day, table)`` tampers with the
    cache before each day's run. Returns the reminders of each day (identical on both)."""
    await cached.apply(*docs)
    await reference.apply(*docs)
    assert cached.cache is not None
    table = cached.cache.table
    assert isinstance(table, MemoryTable)
    seen: set[tuple[str, int, int]] = set()
    per_day = []
    for day in range(DAYS):
        change(day, table)
        as_of = SLOT + day * DAY
        got = await cached.run().run_once(RunContext.at(as_of, clock=cached.runtime.clock))
        want = await reference.run().run_once(RunContext.at(as_of, clock=reference.runtime.clock))
        assert (got.reminders_sent, got.owners_notified) == (
            want.reminders_sent,
            want.owners_notified,
        ), f"day {day}"
        both = [items(await reminder_events(await h.runtime.pool())) for h in (cached, reference)]
        assert both[0] == both[1], f"day {day}: the cache changed the reminders"
        per_day.append(both[0] - seen)
        seen = both[0]
    return per_day


@pytest.fixture
async def pair(database_url: str, reference_url: str) -> AsyncIterator[tuple[Harness, Harness]]:
    cached, reference = Harness(database_url, cache=True), Harness(reference_url)
    yield cached, reference
    for h in (cached, reference):
        await h.close()


async def test_empty_and_warm_cache_give_the_reminders_of_the_ledger_alone(
    pair: tuple[Harness, Harness],
) -> None:
    cached, reference = pair
    per_day = await simulate(cached, reference, documents(1), lambda day, table: None)
    assert sum(len(d) for d in per_day) > 30  # the scenario does send reminders
    assert cached.cache is not None and cached.cache.hits > 0  # and the cache did settle owners
    assert cached.owners.totals.disagreements == 0


async def test_lost_cache_gives_the_same_reminders(pair: tuple[Harness, Harness]) -> None:
    cached, reference = pair

    def lose(day: int, table: MemoryTable) -> None:
        if day in (4, 9):
            table.clear()  # a worker took the partition over without its changelog

    await simulate(cached, reference, documents(2), lose)
    assert cached.owners.totals.disagreements == 0


async def test_stale_cache_gives_the_same_reminders(pair: tuple[Harness, Harness]) -> None:
    """Restored from an older changelog: it lacks marks the ledger has (a miss, never a skip)."""
    cached, reference = pair
    snapshots: dict[int, dict[str, Any]] = {}

    def go_stale(day: int, table: MemoryTable) -> None:
        snapshots[day] = dict(table)
        if day in (6, 11):
            table.clear()
            table.update(snapshots[day - 4])

    await simulate(cached, reference, documents(3), go_stale)


async def test_lying_cache_never_suppresses_a_reminder(
    pair: tuple[Harness, Harness],
) -> None:
    """The cache claims (document, threshold) marks the ledger lacks; the claims are counted in
    the ledger before anything is settled, the count falls short, and those owners go to the
    ledger: the reminders are sent as without a cache, and the cache is put right."""
    cached, reference = pair

    def lie(day: int, table: MemoryTable) -> None:
        if day not in (0, 3, 8):
            return
        # Every owner's every document claimed marked for every threshold: a total lie.
        for owner in {d["OwnerUserId"] for d in docs}:
            owned = [uuid.UUID(d["DocumentId"]) for d in docs if d["OwnerUserId"] == owner]
            table[owner] = encode_marks({doc: {30, 14, 7, 1, 0} for doc in owned})

    docs = documents(4)
    per_day = await simulate(cached, reference, docs, lie)
    assert per_day[0] and (per_day[3] or per_day[8])  # reminders were due on lying days
    assert cached.owners.totals.disagreements >= 2


async def test_a_lie_in_a_batch_of_true_claims_sends_exactly_the_due_reminder(
    database_url: str, pool: asyncpg.Pool
) -> None:
    h = Harness(database_url, cache=True)
    try:
        liar, honest = person_document(DaysLeft=14), person_document(DaysLeft=20)
        await h.apply(liar, honest)
        await h.run().run_once(
            RunContext.at(SLOT - 7 * DAY, clock=h.runtime.clock)
        )  # both crossed 30 then: marked and reminded
        assert h.cache is not None
        table = h.cache.table
        # The cache says the liar's document is marked for 7 as well; it is not.
        table[liar["OwnerUserId"]] = encode_marks({uuid.UUID(liar["DocumentId"]): {30, 7}})
        await h.apply({**liar, "Version": 2, "ExpiresAt": (TODAY + 7 * DAY).isoformat()})
        result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        assert items(await reminder_events(pool)) - {
            (liar["DocumentId"], 30, 21),
            (honest["DocumentId"], 30, 27),
        } == {(liar["DocumentId"], 7, 7)}
        assert result.reminders_sent == 1 and h.owners.totals.disagreements == 1
        assert (liar["DocumentId"], 7) in await marks(pool)
        # Put right: the next run settles both owners from the cache, verified, no transaction.
        before = h.owners.totals.settled_by_cache
        assert (
            await h.run().run_once(RunContext.at(SLOT + timedelta(hours=1), clock=h.runtime.clock))
        ).reminders_sent == 0
        assert h.owners.totals.settled_by_cache - before == 2
        assert h.owners.totals.disagreements == 1
    finally:
        await h.close()


async def test_a_verified_cache_settles_owners_with_fewer_statements(
    database_url: str, reference_url: str
) -> None:
    docs = documents(5, owners=60)
    counts = {}
    for label, url, cache in (("cache", database_url, True), ("no cache", reference_url, False)):
        h = Harness(database_url=url, cache=cache, batch_size=50)
        try:
            await h.apply(*docs)
            first = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
            statements = h.runtime.metrics.db.statements
            before = statements._value.get()
            second = await h.run().run_once(
                RunContext.at(SLOT + timedelta(hours=1), clock=h.runtime.clock)
            )
            counts[label] = statements._value.get() - before
            assert first.reminders_sent > 0 and second.reminders_sent == 0
        finally:
            await h.close()
    # Per batch: with the cache, documents + one count of the claims + progress; without it
    # a transaction per batch on top (BEGIN, the locked read of the marks, COMMIT).
    assert counts["cache"] < counts["no cache"], counts


async def test_one_owner_twice_in_a_batch_from_two_runs_of_a_slot_is_reminded_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """A rerun of a slot while the first run's work item is still queued: the agent can get
    both items of the owner in one batch; the owner is done once, both runs count it."""
    h = Harness(database_url, cache=True)
    try:
        doc = person_document(DaysLeft=5)
        await h.apply(doc)
        owner = uuid.UUID(doc["OwnerUserId"])
        works = []
        for run_id in ("run-a", "run-b"):
            await pool.execute(
                "INSERT INTO profile.document_expiry_runs (run_id, slot, as_of_date, thresholds, "
                "started_at) VALUES ($1, $2, $3, $4, $2)",
                run_id,
                SLOT,
                TODAY,
                [30, 7, 1, 0],
            )
            works.append(
                owners_work(RunOrder("document-expiry", run_id, SLOT, (30, 7, 1, 0)), [owner])
            )
        result = await h.owners([Decoded(MagicMock(), w) for w in works])
        assert (result.sent, result.notified) == (1, 1)
        assert items(await reminder_events(pool)) == {(doc["DocumentId"], 7, 5)}
        done = await pool.fetch(
            "SELECT run_id, owners_done, reminders_sent FROM profile.document_expiry_runs "
            "ORDER BY run_id"
        )
        assert [(r["run_id"], r["owners_done"]) for r in done] == [("run-a", 1), ("run-b", 1)]
        assert sum(r["reminders_sent"] for r in done) == 1
    finally:
        await h.close()


async def test_an_owner_that_grew_past_its_cache_value_is_checked_by_a_bounded_read(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cached while small, then 2,000 documents more in the window: the check reads one
    document more than the value names (enough to refuse it), never the whole owner, and the
    ledger sends every new reminder once."""
    from db import document_expiry_reminders as repo

    read: list[int] = []
    real = repo.check

    async def counted(*args: Any, **kwargs: Any) -> Any:
        docs = await real(*args, **kwargs)
        read.append(len(docs))
        return docs

    monkeypatch.setattr(repo, "check", counted)
    h = Harness(database_url, cache=True)
    try:
        owner = str(uuid.uuid4())
        first = person_document(OwnerUserId=owner, DaysLeft=20)
        await h.apply(first)
        assert (
            await h.run().run_once(RunContext.at(SLOT - DAY, clock=h.runtime.clock))
        ).reminders_sent == 1
        grown = [person_document(OwnerUserId=owner, DaysLeft=10) for _ in range(2_000)]
        await h.apply(*grown)
        result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        assert read and max(read) <= 2, read  # the value names one document
        assert result.reminders_sent == 2_000
        sent = items(await reminder_events(await h.runtime.pool()))
        assert {d for d, _, _ in sent} == {d["DocumentId"] for d in [first, *grown]}
        assert len(sent) == 2_001, "each document once"
    finally:
        await h.close()

"""Marker ids are time-ordered (ops.uuid_v7, migration 0030): version 7, their first 48 bits
the Unix milliseconds they were made at, so the markers' primary key and the console's
(reminded_at, id) index grow at their right edge instead of at a random leaf per insert."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from devkit.harness.profile import SLOT, Harness, person_document
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


def millis(u: uuid.UUID) -> int:
    return u.int >> 80


@pytest.fixture
async def h(database_url: str) -> AsyncIterator[Harness]:
    harness = Harness(database_url)
    yield harness
    await harness.close()


async def test_uuid_v7_is_version_7_and_ordered_by_the_time_it_was_made(
    pool: asyncpg.Pool,
) -> None:
    before = datetime.now(UTC)
    # One statement per id: each sees a later clock than the one before.
    ids = [await pool.fetchval("SELECT ops.uuid_v7()") for _ in range(50)]
    batch = [r[0] for r in await pool.fetch("SELECT ops.uuid_v7() FROM generate_series(1, 1000)")]
    after = datetime.now(UTC)
    every = ids + batch
    assert {u.version for u in every} == {7}
    assert {u.variant for u in every} == {uuid.RFC_4122}
    assert len(set(every)) == len(every)
    assert [millis(u) for u in ids] == sorted(millis(u) for u in ids)
    assert millis(ids[-1]) <= min(millis(u) for u in batch)
    # The database and this process read the same clock (the local stack).
    lo, hi = int(before.timestamp() * 1000) - 1000, int(after.timestamp() * 1000) + 1000
    assert all(lo <= millis(u) <= hi for u in every)


async def test_the_claims_markers_have_time_ordered_ids(h: Harness, pool: asyncpg.Pool) -> None:
    await h.apply(*(person_document(DaysLeft=left) for left in (0, 1, 7, 20)))
    started = int(datetime.now(UTC).timestamp() * 1000) - 1000
    await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    first = [r[0] for r in await pool.fetch("SELECT id FROM profile.document_expiry_reminders")]
    # A later claim's markers sort after every earlier one's.
    await h.apply(person_document(DaysLeft=3))
    await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    rows = await pool.fetch("SELECT id FROM profile.document_expiry_reminders")
    later = [r[0] for r in rows if r[0] not in set(first)]
    assert len(first) == 4 + 3 + 2 + 1  # crossed thresholds of DaysLeft 0, 1, 7, 20
    assert len(later) == 2  # DaysLeft 3 crosses 7 and 30
    assert {u.version for u in first + later} == {7}
    assert all(millis(u) >= started for u in first)
    assert min(later) > max(first)

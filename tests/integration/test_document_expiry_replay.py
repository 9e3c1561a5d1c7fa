"""Replaying a past day, or owner work delivered late, never re-sends: after runs day by day
up to D, nothing a marker or a later run covered goes out again, even where prune has
deleted the markers (the durable prune horizon clamps every window)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from devkit.harness.profile import SLOT, Harness, items, person_document, reminder_events
from streams.slices.profile.work import RunOrder
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

D = SLOT
# ExpiresAt relative to D: long expired (pruned by D's run), just inside the retention,
# recently expired, due and ahead.
OFFSETS = (-125, -110, -100, -95, -91, -90, -89, -60, -30, -5, 0, 1, 5, 20, 29, 40)


@pytest.fixture
async def h(database_url: str) -> AsyncIterator[Harness]:
    harness = Harness(database_url)
    yield harness
    await harness.close()


async def outbox(pool: asyncpg.Pool) -> tuple[int, list[tuple[str, int]]]:
    """Reminder events in the outbox and the documents of each, in insertion order."""
    events = await reminder_events(pool)
    return len(events), [(e["_key"], len(e["Documents"])) for e in events]


async def runs_up_to_d(h: Harness, first: int) -> None:
    docs = [person_document(ExpiresAt=(D + timedelta(days=o)).date()) for o in OFFSETS]
    await h.apply(*docs)
    for back in range(first, -1, -1):
        await h.run().run_once(RunContext.at(D - timedelta(days=back), clock=h.runtime.clock))


async def test_replays_of_past_days_send_nothing_already_covered(
    h: Harness, pool: asyncpg.Pool
) -> None:
    await runs_up_to_d(h, 130)
    before = await outbox(pool)
    sent = items(await reminder_events(pool))
    horizon = await pool.fetchval("SELECT pruned_before FROM profile.document_expiry_prune_horizon")
    assert horizon == (D - timedelta(days=90)).date()
    for back in (1, 30, 120):
        result = await h.run().run_once(
            RunContext.at(D - timedelta(days=back), clock=h.runtime.clock)
        )
        assert (back, result.reminders_sent, result.owners_notified) == (back, 0, 0)
        assert await outbox(pool) == before
    assert items(await reminder_events(pool)) == sent
    # The horizon is never lowered by a replay's prune.
    assert (
        await pool.fetchval("SELECT pruned_before FROM profile.document_expiry_prune_horizon")
        == horizon
    )


async def test_late_owner_work_of_an_old_slot_sends_nothing_covered(
    h: Harness, pool: asyncpg.Pool
) -> None:
    await runs_up_to_d(h, 130)
    before = await outbox(pool)
    owners = [
        uuid.UUID(r["owner_user_id"].hex)
        for r in await pool.fetch("SELECT DISTINCT owner_user_id FROM profile.person_documents")
    ]
    for back in (1, 30, 120):
        order = RunOrder("document-expiry", f"late-{back}", D - timedelta(days=back), (30, 7, 1, 0))
        result = await h.owners.process_inline([order.work(o) for o in owners])
        assert (back, result.sent, result.failed) == (back, 0, 0)
        assert await outbox(pool) == before

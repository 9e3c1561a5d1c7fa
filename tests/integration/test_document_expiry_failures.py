"""An owner that fails is logged and skipped, the run goes on, the next run does it; an
unwell database fails owners (inline) or holds the batch for a retry (agent), never half."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest

from db.connector import DatabaseUnavailable
from tests.support.profile import (
    MASK,
    SLOT,
    Harness,
    items,
    marks,
    person_document,
    reminder_events,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def h(database_url: str) -> AsyncIterator[Harness]:
    harness = Harness(database_url)
    yield harness
    await harness.close()


async def refuse_markers_of(pool: asyncpg.Pool, owner: str, sqlstate: str) -> None:
    """A trigger that fails every marker insert of ``owner`` with ``sqlstate``."""
    await pool.execute(
        f"""
        CREATE FUNCTION profile.refuse_owner() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.owner_user_id = '{owner}'::uuid THEN
                RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_owner BEFORE INSERT ON profile.document_expiry_reminders
            FOR EACH ROW EXECUTE FUNCTION profile.refuse_owner();
        """
    )


async def test_a_failing_owner_is_logged_and_skipped_while_the_others_commit(
    h: Harness, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    docs = [person_document(DaysLeft=d) for d in (3, 4, 5)]
    bad = docs[1]
    await h.apply(*docs)
    await refuse_markers_of(pool, bad["OwnerUserId"], "22023")  # a data exception
    caplog.set_level(logging.INFO)
    result = await h.run().run_once(SLOT)
    assert (result.owners_total, result.owners_done, result.owners_failed) == (3, 3, 1)
    assert result.reminders_sent == 2
    assert items(await reminder_events(pool)) == {
        (docs[0]["DocumentId"], 7, 3),
        (docs[2]["DocumentId"], 7, 5),
    }
    assert not any(d == bad["DocumentId"] for d, _ in await marks(pool))
    [line] = [r.getMessage() for r in caplog.records if "action=owner_failed" in r.getMessage()]
    assert f"owner_user_id={bad['OwnerUserId']}" in line and "sqlstate=22023" in line
    assert MASK not in caplog.text
    assert h.metrics.errors._value.get() == 1
    # Fixed: the next run sends what was left, and only that.
    await pool.execute("DROP TRIGGER refuse_owner ON profile.document_expiry_reminders")
    again = await h.run().run_once(SLOT)
    assert again.reminders_sent == 1
    assert (bad["DocumentId"], 7, 4) in items(await reminder_events(pool))


async def test_an_unwell_database_fails_the_owners_inline_and_the_agent_retries(
    h: Harness, pool: asyncpg.Pool
) -> None:
    docs = [person_document(DaysLeft=d) for d in (3, 4)]
    await h.apply(*docs)
    await refuse_markers_of(pool, docs[1]["OwnerUserId"], "53100")  # disk full: not the input
    # Inline (the run does the owners): the batch's owners fail together, nothing half-done.
    result = await h.run().run_once(SLOT)
    assert (result.owners_done, result.owners_failed, result.reminders_sent) == (2, 2, 0)
    assert await marks(pool) == set() and await reminder_events(pool) == []
    # Through the agent the batch raises instead: the consumer retries it and acks nothing.
    agent = Harness(h.runtime.settings.database_url, cache=True)
    try:
        with pytest.raises(DatabaseUnavailable):
            await agent.run().run_once(SLOT)
        assert await marks(pool) == set() and await reminder_events(pool) == []
    finally:
        await agent.close()
    await pool.execute("DROP TRIGGER refuse_owner ON profile.document_expiry_reminders")
    assert (await h.run().run_once(SLOT)).reminders_sent == 2

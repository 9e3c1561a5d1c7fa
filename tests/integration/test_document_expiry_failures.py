"""An owner that fails is logged and skipped, the run goes on, the next run does it; an
unwell database fails owners (inline) or holds the batch for a retry (agent), never half."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from datetime import date
from typing import Any

import asyncpg
import pytest

from db.connector import DatabaseUnavailable
from devkit.harness.profile import (
    MASK,
    SLOT,
    TODAY,
    Harness,
    items,
    marks,
    person_document,
    reminder_events,
)
from streams.timers.context import RunContext

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
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (result.owners_total, result.owners_done, result.owners_failed) == (3, 3, 1)
    assert result.reminders_sent == 2
    # Not a clean run: every document of the window is checked, the failed owner's owes.
    assert result.backlog == 1
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
    again = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (again.reminders_sent, again.backlog) == (1, 0)
    assert (bad["DocumentId"], 7, 4) in items(await reminder_events(pool))


async def test_an_unwell_database_fails_the_owners_inline_and_the_agent_retries(
    h: Harness, pool: asyncpg.Pool
) -> None:
    docs = [person_document(DaysLeft=d) for d in (3, 4)]
    await h.apply(*docs)
    await refuse_markers_of(pool, docs[1]["OwnerUserId"], "53100")  # disk full: not the input
    # Inline (the run does the owners): the batch's owners fail together, nothing half-done.
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (result.owners_done, result.owners_failed, result.reminders_sent) == (2, 2, 0)
    assert await marks(pool) == set() and await reminder_events(pool) == []
    # Through the agent the batch raises instead: the consumer retries it and acks nothing.
    agent = Harness(h.runtime.settings.database_url, cache=True)
    try:
        with pytest.raises(DatabaseUnavailable):
            await agent.run().run_once(RunContext.at(SLOT, clock=agent.runtime.clock))
        assert await marks(pool) == set() and await reminder_events(pool) == []
    finally:
        await agent.close()
    await pool.execute("DROP TRIGGER refuse_owner ON profile.document_expiry_reminders")
    assert (await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))).reminders_sent == 2


async def hold_marker_of(database_url: str, document: dict[str, Any]) -> asyncpg.Connection:
    """Another session inserts the 30-day marker of ``document`` and keeps its transaction
    open: a claim of that document waits on the row until its lock_timeout (55P03)."""
    conn = await asyncpg.connect(database_url)
    await conn.execute("BEGIN")
    await conn.execute(
        "INSERT INTO profile.document_expiry_reminders (id, document_id, owner_user_id, type,"
        " threshold_days, expires_at, reminded_at) VALUES (gen_random_uuid(), $1, $2, $3, 30,"
        " $4, $5)",
        uuid.UUID(document["DocumentId"]),
        uuid.UUID(document["OwnerUserId"]),
        document["Type"],
        date.fromisoformat(document["ExpiresAt"]),
        SLOT,
    )
    return conn


@pytest.mark.parametrize("mode", ["inline", "kafka"])
@pytest.mark.parametrize("fault", ["permanent", "transient"])
async def test_one_failing_owner_among_500_leaves_the_others_reminded_in_the_same_run(
    database_url: str, pool: asyncpg.Pool, mode: str, fault: str
) -> None:
    """Permanent: a data error on the owner's marker insert. Transient: the owner's marker
    held by another session, the claim waiting past lock_timeout. ``kafka`` is the agent's
    apply (what the owner-work consumer calls), ``inline`` the run's own fan-out."""
    h = Harness(database_url, cache=mode == "kafka", db_lock_timeout_seconds=0.2)
    holder: asyncpg.Connection | None = None
    try:
        docs = [person_document(DaysLeft=5 + i % 20) for i in range(500)]
        bad = docs[137]
        await h.apply(*docs)
        if fault == "permanent":
            await refuse_markers_of(pool, bad["OwnerUserId"], "22023")
        else:
            holder = await hold_marker_of(database_url, bad)
        result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        assert (result.owners_total, result.owners_done, result.owners_failed) == (500, 500, 1)
        assert result.reminders_sent == 499 and result.owners_notified == 499
        row = await pool.fetchrow(
            "SELECT owners_failed, reminders_sent FROM profile.document_expiry_runs"
            " WHERE run_id = $1",
            result.run_id,
        )
        assert tuple(row) == (1, 499)
        assert h.metrics.owners.labels("failed")._value.get() == 1
        sent = {d for d, _, _ in items(await reminder_events(pool))}
        assert sent == {d["DocumentId"] for d in docs} - {bad["DocumentId"]}
        # The fault gone, the next cycle reminds the failed owner, and only it.
        if holder is not None:
            await holder.execute("ROLLBACK")
        else:
            await pool.execute("DROP TRIGGER refuse_owner ON profile.document_expiry_reminders")
        again = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        assert (again.owners_failed, again.reminders_sent) == (0, 1)
        events = await reminder_events(pool)
        assert len(events) == 500
        left = (date.fromisoformat(bad["ExpiresAt"]) - TODAY).days
        assert (bad["DocumentId"], 30, left) in items(events)
    finally:
        if holder is not None:
            await holder.close()
        await h.close()

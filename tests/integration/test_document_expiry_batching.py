"""Owners committed many per transaction: failing owners in a group are isolated (the group is
halved until each is alone) while every other owner commits; a work item delivered twice to
the same worker is done and counted once."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from devkit.harness.profile import (
    MASK,
    SLOT,
    TODAY,
    Harness,
    items,
    marks,
    owners_work,
    person_document,
    reminder_events,
)
from streams.input.consumer import Decoded
from streams.slices.profile.work import RunOrder
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


@pytest.fixture
async def h(database_url: str) -> AsyncIterator[Harness]:
    harness = Harness(database_url, cache=True)
    yield harness
    await harness.close()


async def refuse_markers_of(pool: asyncpg.Pool, owners: list[str]) -> None:
    """A trigger that fails every marker insert of ``owners`` with a data exception."""
    listed = ",".join(f"'{o}'::uuid" for o in owners)
    await pool.execute(
        f"""
        CREATE FUNCTION profile.refuse_owners() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.owner_user_id IN ({listed}) THEN
                RAISE EXCEPTION 'refused' USING ERRCODE = '22023';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_owners BEFORE INSERT ON profile.document_expiry_reminders
            FOR EACH ROW EXECUTE FUNCTION profile.refuse_owners();
        """
    )


async def test_failing_owners_of_one_transaction_are_isolated_and_the_others_commit(
    h: Harness, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    docs: list[dict[str, Any]] = []
    for i in range(21):
        owner = str(uuid.uuid4())
        docs += [person_document(OwnerUserId=owner, DaysLeft=d) for d in range(i % 3, 30, 14)]
    await h.apply(*docs)
    owners = list(dict.fromkeys(d["OwnerUserId"] for d in docs))
    bad = [owners[4], owners[17]]
    await refuse_markers_of(pool, bad)
    caplog.set_level(logging.INFO)
    # All 21 owners reach the per-owner worker in one batch: one group, one transaction.
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (result.owners_total, result.owners_done, result.owners_failed) == (21, 21, 2)
    good = [d for d in docs if d["OwnerUserId"] not in bad]
    assert result.reminders_sent == len(good) and result.owners_notified == 19
    sent = await reminder_events(pool)
    assert sorted(e["OwnerUserId"] for e in sent) == sorted(o for o in owners if o not in bad)
    assert {d for d, _, _ in items(sent)} == {d["DocumentId"] for d in good}
    marked = {d for d, _ in await marks(pool)}
    assert not marked & {d["DocumentId"] for d in docs if d["OwnerUserId"] in bad}
    failed = [r.getMessage() for r in caplog.records if "action=owner_failed" in r.getMessage()]
    assert sorted(line.split("owner_user_id=")[1].split()[0] for line in failed) == sorted(bad)
    assert all("sqlstate=22023" in line for line in failed)
    assert h.metrics.errors._value.get() == 2
    assert MASK not in caplog.text
    # Fixed: the next run sends exactly what the two owners were owed.
    await pool.execute("DROP TRIGGER refuse_owners ON profile.document_expiry_reminders")
    again = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (again.owners_failed, again.owners_notified) == (0, 2)
    assert again.reminders_sent == len(docs) - len(good)


class KafkaEvent:
    """What the agent hands over for a record read from Kafka: its coordinates."""

    def __init__(self, partition: int, offset: int) -> None:
        self.message = type("Message", (), {"partition": partition, "offset": offset})()


async def test_a_work_item_delivered_again_is_done_and_counted_once(
    h: Harness, pool: asyncpg.Pool
) -> None:
    docs = [person_document(DaysLeft=d) for d in (3, 12, 25)]
    await h.apply(*docs)
    await pool.execute(
        "INSERT INTO profile.document_expiry_runs (run_id, slot, as_of_date, thresholds, "
        "started_at) VALUES ('run-a', $1, $2, $3, $1)",
        SLOT,
        TODAY,
        [30, 7, 1, 0],
    )
    order = RunOrder("document-expiry", "run-a", SLOT, (30, 7, 1, 0))
    item = owners_work(order, [uuid.UUID(d["OwnerUserId"]) for d in docs])
    first = await h.owners([Decoded(KafkaEvent(1, 7), item)])
    assert (first.owners, first.notified, first.applied_positions) == (3, 3, {0})
    # The same record again (a tail the gap healer read, then the stream delivered).
    again = await h.owners([Decoded(KafkaEvent(1, 7), item)])
    assert (again.owners, again.ledger, again.applied_positions) == (0, 0, set())
    row = await pool.fetchrow(
        "SELECT owners_done, owners_notified, reminders_sent FROM profile.document_expiry_runs"
    )
    assert tuple(row) == (3, 3, 3)
    assert len(await reminder_events(pool)) == 3
    # Another record with the same owners (a second item of a rerun) is work, not a replay.
    other = await h.owners([Decoded(KafkaEvent(1, 8), item)])
    assert (other.owners, other.settled_by_cache, other.notified) == (3, 3, 0)

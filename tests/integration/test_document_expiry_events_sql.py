"""The claim statement writes each owner's DocumentExpiryReminderEvents to the outbox itself
(db/queries/document_expiry_reminders.sql). Its payloads are the contract's wire form byte for
byte, whatever the documents hold; its split follows the setting; and what the contract
refuses (an item field too long, an event too large) fails the owner before the commit, alone,
while the other owners of its chunk commit."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import asyncpg
import pytest

from devkit.harness.profile import (
    SLOT,
    Harness,
    items,
    marks,
    person_document,
    reminder_events,
)
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS
from streams.contracts.profile import DocumentExpiryReminderEvent
from streams.slices.profile import reminders
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

# Strings JSON must escape, and characters it must not: quotes, a backslash, every control
# character, DEL, a line separator, an accented letter, an astral-plane emoji.
HOSTILE = ['Pass"port', "back\\slash", "".join(map(chr, range(1, 32))), "\x7f\u2028é😀", " "]


@pytest.fixture
async def h(database_url: str) -> AsyncIterator[Harness]:
    harness = Harness(database_url)
    yield harness
    await harness.close()


async def outbox_payloads(pool: asyncpg.Pool) -> list[str]:
    # The payload column is json (not jsonb): the statement's text, as written.
    return [r[0] for r in await pool.fetch("SELECT payload::text FROM ops.outbox ORDER BY id")]


async def test_every_payload_is_the_contracts_wire_form_byte_for_byte(
    h: Harness, pool: asyncpg.Pool
) -> None:
    owner = str(uuid.uuid4())
    docs = [
        person_document(OwnerUserId=owner, DaysLeft=left, Type=t[:32], NumberMask=mask)
        for left, t, mask in zip(
            (-3, 0, 1, 6, 29),
            HOSTILE,
            ["*" * 64, None, "a\nb", "45** ****12", "ü" * 64],
            strict=True,
        )
    ]
    other = person_document(DaysLeft=7)
    await h.apply(*docs, other)
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert result.reminders_sent == 6
    payloads = await outbox_payloads(pool)
    assert len(payloads) == 2
    for text in payloads:
        event = DocumentExpiryReminderEvent.model_validate_json(text)
        assert event.to_json().decode() == text
    mine = json.loads(payloads[[json.loads(p)["OwnerUserId"] for p in payloads].index(owner)])
    # In (ExpiresAt, DocumentId) order, every field as the document has it.
    assert [(d["Type"], d["NumberMask"], d["DaysLeft"]) for d in mine["Documents"]] == [
        (d["Type"], d["NumberMask"], left) for d, left in zip(docs, (-3, 0, 1, 6, 29), strict=True)
    ]
    assert [d["ThresholdDays"] for d in mine["Documents"]] == [0, 0, 1, 7, 30]
    assert mine["RemindedAt"] == SLOT.isoformat()


async def test_an_owners_documents_are_split_into_events_of_the_configured_size(
    database_url: str, pool: asyncpg.Pool
) -> None:
    h = Harness(database_url, document_expiry_max_documents_per_event=3)
    try:
        owner = str(uuid.uuid4())
        docs = [person_document(OwnerUserId=owner, DaysLeft=d) for d in (5, 1, 3, 2, 4, 6, 0)]
        await h.apply(*docs)
        result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    finally:
        await h.close()
    assert result.reminders_sent == 7
    events = await reminder_events(pool)
    assert [len(e["Documents"]) for e in events] == [3, 3, 1]
    assert [d["DaysLeft"] for e in events for d in e["Documents"]] == [0, 1, 2, 3, 4, 5, 6]
    assert {e["_key"] for e in events} == {owner}
    assert len({e["_headers"]["work-id"] for e in events}) == 1
    assert {e["_headers"]["event-type"] for e in events} == {"DocumentExpiryReminderEvent"}


@pytest.mark.parametrize(
    ("column", "value", "widened"),
    # (A Type over 32 characters is refused by the markers' own column too.)
    [("type", "", None), ("number_mask", "*" * 65, 80)],
)
async def test_a_document_the_contract_refuses_fails_its_owner_alone(
    h: Harness, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture, column: str, value: str,
    widened: int | None,
) -> None:  # fmt: skip
    docs = [person_document(DaysLeft=d) for d in (3, 4, 5)]
    bad = docs[1]
    await h.apply(*docs)
    # A row the input contract refuses (written by an older version, or by hand). The schema
    # holds Type and NumberMask to the contract's most characters: widened here, as a
    # migration might one day, to show the claim does not rely on it.
    if widened is not None:
        await pool.execute(
            f"ALTER TABLE profile.person_documents ALTER COLUMN {column} TYPE varchar({widened})"
        )
    await pool.execute(
        f"UPDATE profile.person_documents SET {column} = $1 WHERE document_id = $2",
        value,
        uuid.UUID(bad["DocumentId"]),
    )
    result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (result.owners_done, result.owners_failed, result.reminders_sent) == (3, 1, 2)
    assert items(await reminder_events(pool)) == {
        (docs[0]["DocumentId"], 7, 3),
        (docs[2]["DocumentId"], 7, 5),
    }
    assert not any(d == bad["DocumentId"] for d, _ in await marks(pool))
    [line] = [r.getMessage() for r in caplog.records if "action=owner_failed" in r.getMessage()]
    assert "error=BrokenItem" in line and (not value or value not in line)


async def test_an_event_over_the_contracts_size_fails_its_owner_alone(
    database_url: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three documents make an event of about 800 bytes; one of about 270 fits.
    smaller = replace(DOCUMENT_EXPIRY_REMINDERS, max_payload_bytes=600)
    monkeypatch.setattr(reminders, "DOCUMENT_EXPIRY_REMINDERS", smaller)
    h = Harness(database_url)
    try:
        big = str(uuid.uuid4())
        docs = [person_document(OwnerUserId=big, DaysLeft=d) for d in (1, 2, 3)]
        small = person_document(DaysLeft=4)
        await h.apply(*docs, small)
        result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    finally:
        await h.close()
    assert (result.owners_failed, result.reminders_sent) == (1, 1)
    assert [e["OwnerUserId"] for e in await reminder_events(pool)] == [small["OwnerUserId"]]
    assert {d for d, _ in await marks(pool)} == {small["DocumentId"]}

"""The claim statement sums up each owner it covered in one row (db/queries/
document_expiry_reminders.sql): how many documents, the thresholds already marked, t* of each
document it won in its events' order, the owner cache's value (exactly what encode_marks
writes for the documents' crossed thresholds, and what the ledger then confirms), the won
documents for a log line only when asked, and a full chunk's keyset cursor."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from db import document_expiry_reminders as marks_repo
from devkit.harness.profile import SLOT, TODAY, Harness, person_document
from streams.domain.profile import (
    DEFAULT_THRESHOLDS,
    crossed,
    decode_marks,
    encode_marks,
    scan_window,
)
from streams.slices.profile.reminders import events_out

pytestmark = pytest.mark.integration

NIL = uuid.UUID(int=0)
WINDOW = scan_window(TODAY, DEFAULT_THRESHOLDS)


@pytest.fixture
async def h(database_url: str) -> AsyncIterator[Harness]:
    harness = Harness(database_url)
    yield harness
    await harness.close()


async def claim(
    pool: asyncpg.Pool, owners: list[uuid.UUID], limit: int = 5_000, log_items: bool = False
) -> list[marks_repo.ClaimedOwner]:
    out = events_out(SLOT, "", 1000, dict.fromkeys(owners, "{}"))
    async with pool.acquire() as conn, conn.transaction():
        return await marks_repo.claim(
            conn, sorted(owners), WINDOW.lo, WINDOW.hi, TODAY, DEFAULT_THRESHOLDS, SLOT,
            (min(owners), NIL), limit, out, log_items,
        )  # fmt: skip


def owned(owner: uuid.UUID, lefts: tuple[int, ...]) -> list[dict[str, Any]]:
    return [person_document(OwnerUserId=str(owner), DaysLeft=left) for left in lefts]


async def test_an_owners_row_sums_up_its_documents_and_its_cache_value(
    h: Harness, pool: asyncpg.Pool
) -> None:
    a, b = sorted((uuid.uuid4(), uuid.uuid4()))
    lefts = (29, -3, 6, 1, 0)
    docs_a, docs_b = owned(a, lefts), owned(b, (7,))
    await h.apply(*docs_a, *docs_b)
    # One threshold of DaysLeft 1 is marked already (a parallel instance, or an older run).
    marked = docs_a[3]
    await pool.execute(
        "INSERT INTO profile.document_expiry_reminders (id, document_id, owner_user_id, type,"
        " threshold_days, expires_at, reminded_at) VALUES (gen_random_uuid(), $1, $2, 'P', 30,"
        " $3::text::date, $4)",
        uuid.UUID(marked["DocumentId"]), a, marked["ExpiresAt"], SLOT,
    )  # fmt: skip

    row_a, row_b = await claim(pool, [b, a])

    assert (row_a.owner_user_id, row_b.owner_user_id) == (a, b)
    assert (row_a.documents, row_b.documents) == (5, 1)
    assert (row_a.skipped, row_b.skipped) == (1, 0)
    # t* of each document, in (ExpiresAt, DocumentId) order: the events' items.
    assert row_a.won == [0, 0, 1, 7, 30]
    assert row_b.won == [7]
    by_expiry = sorted(zip(lefts, docs_a, strict=True), key=lambda p: p[0])
    assert row_a.marks == encode_marks(
        {uuid.UUID(d["DocumentId"]): crossed(left, DEFAULT_THRESHOLDS) for left, d in by_expiry}
    )
    assert row_b.marks == f"{docs_b[0]['DocumentId']}=30,7"
    assert row_a.logged is None and row_a.broken_document is None and row_a.breaks is None
    assert row_a.largest_event == row_b.largest_event and row_a.largest_event
    assert row_b.last_document == uuid.UUID(docs_b[0]["DocumentId"])
    # The value claims exactly what the ledger now holds: the check finds nothing unmarked.
    checked = await marks_repo.check(pool, {a: 6}, WINDOW.lo, WINDOW.hi, TODAY, DEFAULT_THRESHOLDS)
    assert {str(c.document_id): crossed(c.days_left, DEFAULT_THRESHOLDS) for c in checked} == (
        decode_marks(row_a.marks)
    )
    assert {c.unmarked for c in checked} == {0}


async def test_the_won_documents_are_listed_for_the_log_only_when_asked(
    h: Harness, pool: asyncpg.Pool
) -> None:
    owner = uuid.uuid4()
    docs = owned(owner, (3, 0))
    await h.apply(*docs, *owned(other := uuid.uuid4(), (5,)))
    await pool.execute(
        "INSERT INTO profile.document_expiry_reminders (id, document_id, owner_user_id, type,"
        " threshold_days, expires_at, reminded_at) SELECT gen_random_uuid(), $1, $2, 'P', t,"
        " $3::text::date, $4 FROM unnest(ARRAY[30, 7]) t",
        uuid.UUID(docs[0]["DocumentId"]), owner, docs[0]["ExpiresAt"], SLOT,
    )  # fmt: skip

    rows = {r.owner_user_id: r for r in await claim(pool, [owner, other], log_items=True)}

    # The document with every crossed threshold marked already is not sent, nor listed.
    assert rows[owner].won == [0]
    assert json.loads(rows[owner].logged or "") == [
        [docs[1]["DocumentId"], "InternationalPassport", 0, 0]
    ]
    # Nothing won: nothing listed, and the value still covers both documents.
    [again] = await claim(pool, [owner], log_items=True)
    assert (again.documents, again.skipped, again.won, again.logged) == (2, 2 + 4, [], None)
    assert (again.marks, again.largest_event) == (rows[owner].marks, None)


async def test_a_full_chunk_names_the_last_document_it_covered(
    h: Harness, pool: asyncpg.Pool
) -> None:
    a, b = sorted((uuid.uuid4(), uuid.uuid4()))
    docs_b = owned(b, (1, 2, 3, 4))
    await h.apply(*owned(a, (1, 2)), *docs_b)

    rows = await claim(pool, [a, b], limit=4)

    assert [(r.owner_user_id, r.documents) for r in rows] == [(a, 2), (b, 2)]
    # The cursor: b's second document in DocumentId order, whatever their ExpiresAt.
    second = sorted(uuid.UUID(d["DocumentId"]) for d in docs_b)[1]
    assert {r.last_document for r in rows} == {second}

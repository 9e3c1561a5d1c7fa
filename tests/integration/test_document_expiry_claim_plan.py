"""A document expiry claim reads its own owners' documents, not the run's whole window; the
run's scan reads the window from its index alone.

Written as ``owner_user_id = ANY($1)`` with a chunk of a few hundred owners, the claim was
planned for its parameters (the first five executions on each connection, and whenever the
plan cache prefers a custom plan) as a scan of the ExpiresAt index over the whole window,
filtered by owner: such a claim read every document of the window (100,000 here; 1,000,000
in the bench, 150 ms a claim instead of 55). Only the generic plan a connection settles on
after them probed by owner. Probed per owner (``unnest($1)`` and a LATERAL range of the
(OwnerUserId, DocumentId) index), a claim reads its chunk whatever the window holds, on a
plan made for its parameters and on a generic one alike.

The scan needs each document's owner, status and deletion flag: with them included in the
ExpiresAt index (migration 0028) it is an index-only scan, no heap page visited per document
on an all-visible page (2.8-3.0 s of statement time over 1,000,000 documents before, 1.5 s after).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from db import document_expiry_reminders as marks_repo
from db import person_documents as documents_repo
from db.connector import Connection, connect
from streams.domain.profile import DEFAULT_THRESHOLDS, scan_window, utc_date
from streams.slices.profile.reminders import events_out
from tests.integration.test_statement_plans import explained

pytestmark = pytest.mark.integration

AS_OF = datetime(2026, 12, 5, 9, tzinfo=UTC)
OWNERS, PER_OWNER = 20_000, 5  # the window: 100,000 documents
NIL = uuid.UUID(int=0)


def documents_read(plan: Any) -> int:
    """Rows of profile.person_documents the plan's scans looked at: returned, or removed by
    a filter or a recheck (EXPLAIN ANALYZE JSON)."""
    read = 0
    stack = [plan]
    while stack:
        node = stack.pop()
        if node.get("Relation Name") == "person_documents":
            looked = (
                node["Actual Rows"]
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            )
            read += int(looked) * int(node.get("Actual Loops", 1))
        stack.extend(node.get("Plans", []))
    return read


async def plans_into(conn: Connection, plans: list[Any]) -> Any:
    """From now on, the plan of each statement ``conn`` runs is appended to ``plans``
    (EXPLAIN ANALYZE JSON); returns the listener, for ``remove_log_listener``."""

    def listen(_conn: Connection, message: Any) -> None:
        text = str(message.message)
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1]))

    await explained(conn)
    conn.add_log_listener(listen)
    return listen


async def seed(conn: Connection, today: Any, owners: int) -> None:
    """``owners`` x PER_OWNER Active documents over the window, vacuumed (as autovacuum leaves
    a table that is mostly read: its pages all-visible)."""
    await conn.execute(
        """
        INSERT INTO profile.person_documents (document_id, owner_user_id, person_id, type,
            number_mask, expires_at, status, is_deleted, version, occurred_at)
        SELECT gen_random_uuid(), o.owner, gen_random_uuid(), 'InternationalPassport',
               '45** ****12', $3::date + (d % 31) - 1, 'Active', false, 1, now()
        FROM (SELECT gen_random_uuid() AS owner FROM generate_series(1, $1::int)) o,
             generate_series(1, $2::int) d
        """,
        owners,
        PER_OWNER,
        today,
    )
    await conn.execute("VACUUM ANALYZE profile.person_documents")


async def test_a_claim_on_a_generic_plan_reads_only_its_owners_documents(
    database_url: str,
) -> None:
    today = utc_date(AS_OF)
    window = scan_window(today, DEFAULT_THRESHOLDS)
    conn = await connect(database_url)
    try:
        await seed(conn, today, OWNERS)
        owners = [
            r[0]
            for r in await conn.fetch(
                "SELECT DISTINCT owner_user_id FROM profile.person_documents ORDER BY 1 LIMIT 500"
            )
        ]
        plans: list[Any] = []
        listen = await plans_into(conn, plans)
        claimed = []
        # Planned for its parameters (the first executions of a prepared statement), then
        # on the generic plan a session keeps after them.
        for group, mode in (
            (owners[:250], "force_custom_plan"),
            (owners[250:], "force_generic_plan"),
        ):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            async with conn.transaction():
                claimed.append(
                    await marks_repo.claim(
                        conn, group, window.lo, window.hi, today, DEFAULT_THRESHOLDS, AS_OF,
                        (group[0], NIL), 5_000, events_out(AS_OF, "", 1000, dict.fromkeys(group, "{}")),
                    )
                )  # fmt: skip
        conn.remove_log_listener(listen)
    finally:
        await conn.close()

    claims = [p for p in plans if "document_expiry_reminders AS r" in p["Query Text"]]
    assert len(claims) == 2, "the claim's plans were not reported"
    for group, rows, plan in zip((owners[:250], owners[250:]), claimed, claims, strict=True):
        assert [r.owner_user_id for r in rows] == sorted(group)
        assert sum(r.documents for r in rows) == 250 * PER_OWNER
        # Its 1,250 documents (and an index page's neighbours), not the window's 100,000.
        assert documents_read(plan["Plan"]) <= 2 * 250 * PER_OWNER


def scans_of_documents(plan: Any) -> list[dict[str, Any]]:
    """The plan's scan nodes of profile.person_documents (EXPLAIN ANALYZE JSON)."""
    found, stack = [], [plan]
    while stack:
        node = stack.pop()
        if node.get("Relation Name") == "person_documents":
            found.append(node)
        stack.extend(node.get("Plans", []))
    return found


async def test_the_run_scan_reads_the_window_from_the_index_alone(database_url: str) -> None:
    today = utc_date(AS_OF)
    window = scan_window(today, DEFAULT_THRESHOLDS)
    conn = await connect(database_url)
    try:
        await seed(conn, today, 2_000)
        # Archived and deleted documents are in the index (its predicate is the seed's) and
        # left out by the scan without a heap visit.
        await conn.execute(
            """
            UPDATE profile.person_documents SET status = 'Archived'
            WHERE document_id IN (SELECT document_id FROM profile.person_documents LIMIT 300);
            UPDATE profile.person_documents SET is_deleted = true
            WHERE status = 'Active' AND document_id IN (
                SELECT document_id FROM profile.person_documents WHERE status = 'Active'
                LIMIT 200);
            """
        )
        await conn.execute("VACUUM ANALYZE profile.person_documents")
        plans: list[Any] = []
        listen = await plans_into(conn, plans)
        scanned = 0
        after = (window.lo, NIL)
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            while True:
                page = await documents_repo.scan(conn, window.lo, window.hi, after, 1_000)
                scanned += page.documents
                if page.last is None:
                    break
                after = page.last
            after = (window.lo, NIL)
        conn.remove_log_listener(listen)
    finally:
        await conn.close()

    active = 2_000 * PER_OWNER - 500
    assert scanned == 2 * active
    scans = [
        n for p in plans if "row_number()" in p["Query Text"] for n in scans_of_documents(p["Plan"])
    ]
    assert len(scans) >= 2 * (active // 1_000), "the scan's plans were not reported"
    for node in scans:
        assert node["Node Type"] == "Index Only Scan", node["Node Type"]
        assert node["Index Name"] == "ix_person_documents_expires_at"
        # Its heap fetches are not checked: they follow the visibility map, and VACUUM
        # cannot mark a page all-visible while another session's older transaction runs
        # (CI's parallel tests: 1,323 of 9,500).

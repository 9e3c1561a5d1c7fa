"""A cache entry may save a statement, never decide a state (issue 21, finding 1).

Property, per input agent with a cache (calendar events, person documents; the automation
inputs have none): whatever the cache says between batches (nothing, an older entry it held
before, an entry ahead of the database, an entry for other content), after any sequence of
states (reverts to earlier contents, duplicates, out-of-order Versions) the stored rows are
what the newest Version alone produces: the projection row carries the newest Version's
content, and the Pending reminders are exactly those its state wants (streams/domain).

Real PostgreSQL and the real appliers; the changelog-backed table is a dict in process (the
changelog is tests/e2e's business). A state's content is a function of (key, Version) in an
example, so a replayed Version is a true duplicate, and a later Version may revert to an
earlier one's content.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import date, timedelta
from typing import Any
from unittest.mock import MagicMock

import asyncpg
import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from devkit.harness import profile as documents
from devkit.harness.calendar import make_runtime
from devkit.messages import factories
from streams.domain.calendar import fingerprint as event_fingerprint
from streams.domain.calendar import insertable, wanted_reminders
from streams.input.applier import VersionedStateApplier
from streams.input.consumer import Decoded
from streams.metrics import Metrics
from streams.runtime import Runtime
from streams.slices.calendar.events import CalendarEventsApplier
from streams.slices.profile.documents import PersonDocumentsApplier
from streams.slices.profile.documents import fingerprint as document_fingerprint
from streams.tables.cache import KeyCache

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 100
KEYS = 2
VERSIONS = 5

# Calendar contents: (StartAt hours after T0, Status). Documents: (Status, ExpiresAt days).
EVENT_CONTENTS = [(2, "Planned"), (3, "Planned"), (2, "Cancelled"), (4, "Planned")]
DOCUMENT_CONTENTS = [("Active", 30), ("Archived", 30), ("Active", 60), ("Active", None)]


class DictTable(dict[str, Any]):
    name = "test-cache"


# A step: ("send", key, [versions...]) one batch; ("drop", key); ("rollback", key, n) back to
# the n-th entry the cache held for the key; ("ahead", key, by, content) an entry ahead.
def steps(contents: int) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    send = st.tuples(
        st.just("send"),
        st.integers(0, KEYS - 1),
        st.lists(st.integers(1, VERSIONS), min_size=1, max_size=3),
    )
    drop = st.tuples(st.just("drop"), st.integers(0, KEYS - 1))
    rollback = st.tuples(st.just("rollback"), st.integers(0, KEYS - 1), st.integers(0, 10))
    ahead = st.tuples(
        st.just("ahead"), st.integers(0, KEYS - 1), st.integers(0, 3), st.integers(0, contents - 1)
    )
    return st.lists(st.one_of(send, send, drop, rollback, ahead), min_size=2, max_size=14)


def plans(contents: int) -> st.SearchStrategy[list[list[int]]]:
    """Per key, the content index of each Version (1..VERSIONS)."""
    return st.lists(
        st.lists(st.integers(0, contents - 1), min_size=VERSIONS, max_size=VERSIONS),
        min_size=KEYS,
        max_size=KEYS,
    )


class Harness:
    """Drives one applier with a cache the example may tamper with between batches."""

    def __init__(self, applier: VersionedStateApplier[Any, Any], table: DictTable) -> None:
        self.applier = applier
        self.table = table
        self.history: dict[str, list[Any]] = {}

    def remember(self) -> None:
        for key, value in self.table.items():
            seen = self.history.setdefault(key, [])
            if not seen or seen[-1] != value:
                seen.append(value)

    async def run(self, messages: list[Any]) -> None:
        await self.applier([Decoded(MagicMock(), m) for m in messages])
        self.remember()


async def _play(
    harness: Harness,
    ids: list[str],
    plan: list[list[int]],
    script: list[tuple[Any, ...]],
    message: Any,
    fingerprint: Any,
) -> dict[int, int]:
    """Runs the script; returns the newest Version sent per key index."""
    newest: dict[int, int] = {}
    for step in script:
        kind, k = step[0], step[1]
        key = ids[k]
        if kind == "send":
            await harness.run([message(k, v, plan[k][v - 1]) for v in step[2]])
            newest[k] = max(newest.get(k, 0), *step[2])
        elif kind == "drop":
            harness.table.pop(key, None)
        elif kind == "rollback":
            seen = harness.history.get(key)
            if seen:
                harness.table[key] = seen[step[2] % len(seen)]
        elif kind == "ahead":
            v = max(newest.get(k, 0), (harness.table.get(key) or {"v": 0})["v"]) + step[2]
            harness.table[key] = {"v": v, "fp": fingerprint(message(k, max(v, 1), step[3]))}
    return newest


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    try:
        yield rt
    finally:
        await rt.close()


@pytest.fixture
def examples(request: pytest.FixtureRequest) -> Iterator[Counter[str]]:
    counts: Counter[str] = Counter()
    yield counts
    line = f"{request.node.name}: {counts['examples']} examples, {counts['steps']} steps"
    print(line)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(f"\n[cache] {line}")


def _settings() -> Any:
    return settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# The sequence: v2 moved and committed, the cache rolled back to v1, v3 reverts.
LAGGING_REVERT = [("send", 0, [1]), ("send", 0, [2]), ("rollback", 0, 0), ("send", 0, [3])]


@_settings()
@given(plan=plans(len(EVENT_CONTENTS)), script=steps(len(EVENT_CONTENTS)))
@example(plan=[[0, 1, 0, 0, 0], [0] * VERSIONS], script=LAGGING_REVERT)
@example(plan=[[0, 2, 0, 0, 0], [0] * VERSIONS], script=LAGGING_REVERT)  # un-cancelling
async def test_calendar_events_stored_state_is_the_newest_versions(
    runtime: Runtime, examples: Counter[str], plan: list[list[int]], script: list[tuple[Any, ...]]
) -> None:
    pool: asyncpg.Pool = await runtime.pool()
    await pool.execute("TRUNCATE calendar.event_reminders, calendar.events")
    table = DictTable()
    harness = Harness(CalendarEventsApplier(runtime, KeyCache(table, Metrics().agents)), table)  # type: ignore[arg-type]
    ids = [str(uuid.uuid4()) for _ in range(KEYS)]
    tenant, owner = str(uuid.uuid4()), str(uuid.uuid4())

    def message(k: int, version: int, content: int) -> Any:
        hours, status = EVENT_CONTENTS[content]
        return factories.parsed(
            factories.calendar_event(
                EventId=ids[k],
                TenantId=tenant,
                OwnerUserId=owner,
                StartAt=factories.T0 + timedelta(hours=hours),
                Status=status,
                Version=version,
            )
        )

    note(f"plan={plan} script={script}")
    newest = await _play(harness, ids, plan, script, message, event_fingerprint)
    examples["examples"] += 1
    examples["steps"] += len(script)
    for k, v in newest.items():
        expected = message(k, v, plan[k][v - 1])
        row = await pool.fetchrow(
            "SELECT version, start_at, status FROM calendar.events WHERE event_id = $1::uuid",
            ids[k],
        )
        assert row is not None
        assert (row["version"], row["start_at"], row["status"]) == (
            v,
            expected.start_at,
            expected.status.value,
        ), f"event {k}: stored {dict(row)}, newest is v{v} {EVENT_CONTENTS[plan[k][v - 1]]}"
        pending = await pool.fetch(
            "SELECT offset_minutes, due_at FROM calendar.event_reminders "
            "WHERE event_id = $1::uuid AND status = 'Pending'",
            ids[k],
        )
        want = {
            (s.offset_minutes, s.due_at)
            for s in insertable(wanted_reminders(expected), expected.occurred_at)
        }
        got = {(r["offset_minutes"], r["due_at"]) for r in pending}
        assert got == want, f"event {k} v{v}: Pending reminders {got}, the newest wants {want}"


@_settings()
@given(plan=plans(len(DOCUMENT_CONTENTS)), script=steps(len(DOCUMENT_CONTENTS)))
@example(plan=[[0, 1, 0, 0, 0], [0] * VERSIONS], script=LAGGING_REVERT)  # Active→Archived→Active
async def test_person_documents_stored_state_is_the_newest_versions(
    runtime: Runtime, examples: Counter[str], plan: list[list[int]], script: list[tuple[Any, ...]]
) -> None:
    pool: asyncpg.Pool = await runtime.pool()
    await pool.execute("TRUNCATE profile.person_documents CASCADE")
    table = DictTable()
    harness = Harness(PersonDocumentsApplier(runtime, KeyCache(table, Metrics().agents)), table)  # type: ignore[arg-type]
    ids = [str(uuid.uuid4()) for _ in range(KEYS)]
    owner, person = str(uuid.uuid4()), str(uuid.uuid4())

    def message(k: int, version: int, content: int) -> Any:
        status, days = DOCUMENT_CONTENTS[content]
        expires = documents.TODAY + timedelta(days=days) if days is not None else None
        return documents.parsed(
            documents.person_document(
                DocumentId=ids[k],
                OwnerUserId=owner,
                PersonId=person,
                Status=status,
                ExpiresAt=expires.isoformat() if isinstance(expires, date) else None,
                Version=version,
            )
        )

    note(f"plan={plan} script={script}")
    newest = await _play(harness, ids, plan, script, message, document_fingerprint)
    examples["examples"] += 1
    examples["steps"] += len(script)
    for k, v in newest.items():
        expected = message(k, v, plan[k][v - 1])
        row = await pool.fetchrow(
            "SELECT version, status, expires_at FROM profile.person_documents "
            "WHERE document_id = $1::uuid",
            ids[k],
        )
        assert row is not None
        assert (row["version"], row["status"], row["expires_at"]) == (
            v,
            expected.status.value,
            expected.expires_at,
        ), f"document {k}: stored {dict(row)}, newest is v{v} {DOCUMENT_CONTENTS[plan[k][v - 1]]}"


async def test_a_cache_that_lags_a_commit_cannot_turn_a_revert_into_a_no_op(
    runtime: Runtime,
) -> None:
    """The issue's case: v2 (moved) committed, the cache write lost (worker killed), so the
    cache still holds v1; v3 moves the event back to v1's time. It must be stored."""
    pool: asyncpg.Pool = await runtime.pool()
    table = DictTable()
    applier = CalendarEventsApplier(runtime, KeyCache(table, Metrics().agents))  # type: ignore[arg-type]
    v1 = factories.calendar_event(StartAt=factories.T0 + timedelta(hours=2), Version=1)
    v2 = {**v1, "StartAt": (factories.T0 + timedelta(hours=3)).isoformat(), "Version": 2}
    v3 = {**v1, "Version": 3}
    await applier([Decoded(MagicMock(), factories.parsed(v1))])
    lagging = dict(table)
    await applier([Decoded(MagicMock(), factories.parsed(v2))])
    table.clear()
    table.update(lagging)  # the changelog record of v2 never made it
    result = await applier([Decoded(MagicMock(), factories.parsed(v3))])
    assert result.applied == 1, result
    rows = await pool.fetch(
        "SELECT due_at, status FROM calendar.event_reminders WHERE event_id = $1::uuid",
        v1["EventId"],
    )
    by_status = {(r["due_at"] - factories.T0, r["status"]) for r in rows}
    two, three = timedelta(hours=2), timedelta(hours=3)
    assert by_status == {
        (two - timedelta(minutes=60), "Pending"),
        (two - timedelta(minutes=15), "Pending"),
        (three - timedelta(minutes=60), "Skipped"),
        (three - timedelta(minutes=15), "Skipped"),
    }, by_status
    stored = await pool.fetchrow(
        "SELECT version, start_at FROM calendar.events WHERE event_id = $1::uuid", v1["EventId"]
    )
    assert stored is not None and (stored["version"], stored["start_at"]) == (
        3,
        factories.T0 + two,
    )
    # A replay of v2 afterwards is stale for the database, and teaches the cache v3.
    again = await applier([Decoded(MagicMock(), factories.parsed(v2))])
    assert (again.applied, again.stale) == (0, 1)
    assert table[v1["EventId"]]["v"] == 3

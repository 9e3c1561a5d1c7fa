"""Fuzzed input sequences through the real decode + apply path on real PostgreSQL.

Hypothesis builds sequences of records for one consumer: valid event states (several
Versions per EventId, shuffled, replayed, some with unknown extra fields) mixed with
records that must be dead-lettered (not JSON, null, wrong types, missing fields, tz folder
names, extreme instants and numbers, a NUL that PostgreSQL refuses), split into batches.
They go through ``ContractConsumer.handle`` with the real ``CalendarEventsApplier`` on a
Runtime bound to this test's database. The DLQ is a recording stand-in here (this tier is
about decode + apply against PostgreSQL; tests/e2e/test_input_fuzz_e2e.py uses the real
DLQ topic).

Properties: nothing escapes ``handle``; every record gets exactly one outcome (applied,
noop or dlq), hostile ones dlq and valid ones never; a stale Version never applies and the
Versions applied per EventId only go up; a valid message after the sequence is applied;
and the database ends exactly where the newest Version per EventId says (projection row,
and the Pending reminder rows, against the rules of streams/domain/calendar.py).

One line per agent: ``AGENTS`` maps a topic to its harness; the other input topics get
theirs when their agents exist.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from devkit.harness.calendar import make_runtime
from devkit.harness.input_events import IndexedEv, KeyedMsg, RecordingDlq
from devkit.messages.fuzz import HOSTILE, VALID, History, Record, calendar_history, encode
from devkit.messages.fuzz import calendar_events as valid_calendar_events
from streams.contracts import CALENDAR_EVENTS
from streams.contracts.calendar import CalendarEventChanged
from streams.domain.calendar import insertable, wanted_reminders
from streams.input.consumer import ContractConsumer
from streams.metrics import Metrics
from streams.runtime import Runtime
from streams.slices.calendar.events import CalendarEventsApplier
from streams.tables.cache import KeyCache

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 200
OUTCOMES = {"applied", "noop", "dlq"}


class DictTable(dict[str, Any]):
    """The changelog table in-process (the real one runs in the e2e tier)."""

    name = "calendar-event-cache"


@dataclass
class Run:
    """One example's consumer and what it reported."""

    consumer: ContractConsumer[Any]
    dlq: RecordingDlq
    outcomes: list[tuple[int, str, str | None]] = field(default_factory=list)
    retries: list[float] = field(default_factory=list)


def calendar_consumer(runtime: Runtime, use_cache: bool, run_outcomes: list[Any]) -> Run:
    metrics = Metrics()
    cache = KeyCache(DictTable(), metrics.agents) if use_cache else None  # type: ignore[arg-type]
    applier = CalendarEventsApplier(runtime, cache)
    dlq = RecordingDlq()
    retries: list[float] = []

    async def no_retry(delay: float) -> None:
        # Nothing here makes the database unwell: a retry means an input error was taken
        # for an infrastructure one, which would block the partition forever.
        retries.append(delay)
        raise AssertionError("handle() retried as if the database were unavailable")

    consumer: ContractConsumer[Any] = ContractConsumer(
        CALENDAR_EVENTS,
        applier,
        dlq,  # type: ignore[arg-type]
        metrics.agents,
        sleep=no_retry,
        on_outcome=lambda ev, outcome, reason: run_outcomes.append(
            (cast(IndexedEv, ev).index, outcome, reason)
        ),
    )
    return Run(consumer, dlq, run_outcomes, retries)


# Topic -> builds the consumer under test. One line per agent.
AGENTS: dict[str, Callable[[Runtime, bool, list[Any]], Run]] = {
    CALENDAR_EVENTS.name: calendar_consumer,
}


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    try:
        yield rt
    finally:
        await rt.close()


@pytest.fixture
def examples(request: pytest.FixtureRequest) -> Iterator[Counter[str]]:
    """Counts the examples Hypothesis ran and prints the total after the test."""
    counts: Counter[str] = Counter()
    yield counts
    line = (
        f"{request.node.name}: {counts['examples']} hypothesis examples run to the end, "
        f"{counts['records']} records ({counts['hostile']} hostile), "
        f"{counts['batches']} batches, {counts['cache']} with the cache"
    )
    print_summary(request, line)


def print_summary(request: pytest.FixtureRequest, line: str) -> None:
    """Write past output capture, so the count shows in any run (-q included)."""
    print(line)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(f"\n[fuzz] {line}")


async def _fresh(pool: asyncpg.Pool) -> None:
    await pool.execute("TRUNCATE calendar.event_reminders, calendar.events")


def _events(history: History, batch: list[int]) -> list[IndexedEv]:
    return [
        IndexedEv(i, KeyedMsg(history.records[i].key, history.records[i].value, i)) for i in batch
    ]


async def _handle(run: Run, events: list[IndexedEv]) -> None:
    try:
        await run.consumer.handle(events)  # type: ignore[arg-type]
    except Exception as exc:
        raise AssertionError(f"handle() raised {exc!r}") from exc
    assert not run.retries, "handle() retried (an input error was taken for an outage)"


def _describe(history: History) -> str:
    lines = []
    for n, batch in enumerate(history.batches):
        for i in batch:
            r = history.records[i]
            if r.kind == VALID and r.state is not None:
                s = r.state
                what = f"{s['EventId'][:8]} v{s['Version']} {s['Status']} offs={s['ReminderOffsetsMinutes']}"
            else:
                what = f"HOSTILE {r.why}"
            lines.append(f"batch {n} #{i}: {what}")
    return "\n".join(lines)


def check_outcomes(history: History, run: Run, sentinel_index: int) -> None:
    per_index = defaultdict(list)
    for index, outcome, _reason in run.outcomes:
        per_index[index].append(outcome)
    expected = {*range(len(history.records)), sentinel_index}
    assert set(per_index) == expected, f"no outcome for {sorted(expected - set(per_index))}"
    for index, got in per_index.items():
        assert len(got) == 1 and got[0] in OUTCOMES, f"record #{index}: outcomes {got}"
    assert per_index[sentinel_index] == ["applied"], "a valid message after the fuzz"
    for i, r in enumerate(history.records):
        (outcome,) = per_index[i]
        if r.kind == HOSTILE:
            assert outcome == "dlq", f"hostile record #{i} ({r.why}) ended {outcome}"
        else:
            assert outcome in ("applied", "noop"), f"valid record #{i} ended {outcome}"
    # Versions applied per EventId only go up, and a Version seen in an earlier batch (or
    # an older one) never applies again.
    seen_before: dict[str, int] = {}
    last_applied: dict[str, int] = {}
    for batch in history.batches:
        in_batch: dict[str, int] = {}
        for i in batch:
            r = history.records[i]
            if r.kind != VALID or r.state is None:
                continue
            eid, version = r.state["EventId"], r.state["Version"]
            (outcome,) = per_index[i]
            if outcome == "applied":
                assert version > seen_before.get(eid, -1), (
                    f"#{i} v{version} applied after v{seen_before[eid]} was handled"
                )
                assert version > last_applied.get(eid, -1), (
                    f"#{i} v{version} applied after v{last_applied[eid]}"
                )
                last_applied[eid] = version
            in_batch[eid] = max(in_batch.get(eid, -1), version)
        for eid, version in in_batch.items():
            seen_before[eid] = max(seen_before.get(eid, -1), version)
    # Something was applied for every event that had a valid record.
    for eid in history.newest():
        assert eid in last_applied, f"no state of {eid} was applied"


def check_dlq(history: History, run: Run) -> None:
    hostile = [r for r in history.records if r.kind == HOSTILE]
    assert len(run.dlq.sent) == len(hostile), (len(run.dlq.sent), len(hostile))
    sent = Counter((s["key"], s["value"] or b"") for s in run.dlq.sent)
    want = Counter((r.key, r.value or b"") for r in hostile)
    assert sent == want
    for s in run.dlq.sent:
        headers = dict(s["headers"])
        assert headers.get("dlq-reason"), headers
        # "decode" is the consumer's net for decoder bugs (anything but ContractError).
        assert headers.get("dlq-error-kind") in (
            b"json",
            b"schema",
            b"contract-version",
            b"processing",
        ), headers


async def check_database(pool: asyncpg.Pool, history: History, sentinel_id: str) -> None:
    newest = history.newest()
    rows = {
        str(r["event_id"]): r
        for r in await pool.fetch(
            "SELECT event_id, version, status, kind, start_at, time_zone,"
            " reminder_offsets_minutes FROM calendar.events"
        )
    }
    assert set(rows) == {*newest, sentinel_id}, "projection rows are not the valid EventIds"
    reminders: dict[str, list[asyncpg.Record]] = defaultdict(list)
    for r in await pool.fetch("SELECT event_id, reminder_id, status FROM calendar.event_reminders"):
        reminders[str(r["event_id"])].append(r)
    for eid, state in newest.items():
        m = CalendarEventChanged.model_validate(state)
        row = rows[eid]
        assert row["version"] == m.version, (
            f"{eid}: projection at Version {row['version']}, newest is {m.version}"
        )
        assert (row["status"], row["kind"], row["time_zone"]) == (
            m.status.value,
            m.kind,
            m.time_zone,
        )
        assert row["start_at"] == m.start_at
        assert row["reminder_offsets_minutes"] == sorted(set(m.reminder_offsets_minutes))
        wanted = {s.reminder_id for s in wanted_reminders(m)}
        must = {s.reminder_id for s in insertable(wanted_reminders(m), m.occurred_at)}
        pending = {r["reminder_id"] for r in reminders[eid] if r["status"] == "Pending"}
        # Pending = what the newest state wants and may create; a wanted row already due
        # when the change happened stays Pending only if an earlier state created it.
        assert must <= pending <= wanted, (eid, must, pending, wanted)
        assert {r["status"] for r in reminders[eid]} <= {"Pending", "Skipped"}


@pytest.mark.timeout(900)  # a passing run takes seconds; shrinking a failure takes longer
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(
    history=calendar_history(),
    use_cache=st.sampled_from([True, True, False]),  # production always has the cache
    sentinel=valid_calendar_events(),
)
async def test_fuzzed_sequences_end_in_the_newest_state(
    pool: asyncpg.Pool,
    runtime: Runtime,
    examples: Counter[str],
    history: History,
    use_cache: bool,
    sentinel: dict[str, Any],
) -> None:
    note(_describe(history))
    await _fresh(pool)
    run = AGENTS[CALENDAR_EVENTS.name](runtime, use_cache, [])
    for batch in history.batches:
        await _handle(run, _events(history, batch))

    # Every draw happens before the first await: the example is the same on every replay.
    sentinel = {**sentinel, "EventId": str(uuid.uuid4()), "Version": 1}
    sentinel_index = len(history.records)
    await _handle(
        run, [IndexedEv(sentinel_index, KeyedMsg(b"sentinel", encode(sentinel), sentinel_index))]
    )

    check_outcomes(history, run, sentinel_index)
    check_dlq(history, run)
    await check_database(pool, history, sentinel["EventId"])

    examples["examples"] += 1
    examples["records"] += len(history.records)
    examples["hostile"] += sum(r.kind == HOSTILE for r in history.records)
    examples["batches"] += len(history.batches)
    examples["cache"] += use_cache


def _state(v1: dict[str, Any], version: int, occurred: datetime, **changes: Any) -> Record:
    s = {**v1, "Version": version, "OccurredAt": occurred.isoformat(), **changes}
    return Record(s["EventId"].encode(), encode(s), VALID, s)


async def test_unchanged_newer_version_moves_the_projection_version_with_the_cache(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    """v1, then v3 with the same state (the cache answers it without PostgreSQL), then the
    cache entry is lost (a changelog write lost in a crash) and an out-of-order v2 with
    another state arrives: the projection must stay at v3, not take the older v2."""
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    v1 = {
        "ContractVersion": 1,
        "EventId": str(uuid.uuid4()),
        "TenantId": str(uuid.uuid4()),
        "OwnerUserId": str(uuid.uuid4()),
        "Kind": "Meeting",
        "StartAt": (t0 + timedelta(hours=3)).isoformat(),
        "TimeZone": "UTC",
        "Status": "Planned",
        "ReminderOffsetsMinutes": [60],
        "Version": 1,
        "OccurredAt": t0.isoformat(),
    }
    history = History(
        [
            _state(v1, 1, t0),
            _state(v1, 3, t0 + timedelta(minutes=2)),
            _state(v1, 2, t0 + timedelta(minutes=1), Status="Cancelled"),  # older than v3
        ],
        [[0], [1], [2]],
    )
    outcomes: list[Any] = []
    run = AGENTS[CALENDAR_EVENTS.name](runtime, True, outcomes)
    await _handle(run, _events(history, [0]))
    await _handle(run, _events(history, [1]))
    version = await pool.fetchval("SELECT version FROM calendar.events")
    assert version == 3, f"projection left at Version {version} after v3 was handled"
    run = AGENTS[CALENDAR_EVENTS.name](runtime, True, outcomes)  # a cold cache
    await _handle(run, _events(history, [2]))
    row = await pool.fetchrow("SELECT version, status FROM calendar.events")
    assert (row["version"], row["status"]) == (3, "Planned")

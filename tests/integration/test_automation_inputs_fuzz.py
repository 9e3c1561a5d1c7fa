"""Fuzzed sequences through the four automation agents (real decode + apply on PostgreSQL).

Hypothesis draws contract-valid states of a small world (2 BUs, 3 sources, 2 settings, one
report subscription; odd text, extreme dates and numbers, every firing policy, any zone,
negative offsets, Versions in any order, replays) plus hostile records, and feeds them in
shuffled batches across the four topics through ``ContractConsumer.handle`` with the real
appliers. Properties: nothing escapes ``handle`` and nothing is retried; every record has
one outcome; hostile ones are dead-lettered and valid ones never; each projection ends at
the newest Version per key; and the rows are a fixpoint: planning every BU again at the
same instant changes nothing (the result does not depend on arrival order).
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from db.connector import transaction
from devkit.harness.automation import make_runtime
from devkit.harness.automation_inputs import Inputs
from devkit.harness.input_events import IndexedEv, KeyedMsg, RecordingDlq
from devkit.messages.fuzz import (
    business_units,
    encode,
    reminder_settings,
    report_subscriptions,
    source_events,
)
from streams.contracts import (
    BUSINESS_UNITS,
    REMINDER_SETTINGS,
    REPORT_SUBSCRIPTIONS,
    SOURCE_EVENTS,
    TopicContract,
)
from streams.domain.automation.rules import EnsureOutcome
from streams.input.consumer import ContractConsumer
from streams.metrics import Metrics
from streams.runtime import Runtime

pytestmark = pytest.mark.integration

UNITS = [str(uuid.UUID(int=0xB1)), str(uuid.UUID(int=0xB2))]
SOURCES = [str(uuid.UUID(int=0x51 + i)) for i in range(3)]
SETTINGS = [str(uuid.UUID(int=0xE1)), str(uuid.UUID(int=0xE2))]
SUBSCRIPTION = str(uuid.UUID(int=0xC1))
TYPES = ["Doc", "Dóc", "Doc 2"]
DATES = st.dates().map(lambda d: d.isoformat()) | st.sampled_from(["2026-12-24", "2027-01-31"])
TOPICS: dict[str, TopicContract[Any]] = {
    c.name: c for c in (SOURCE_EVENTS, REMINDER_SETTINGS, BUSINESS_UNITS, REPORT_SUBSCRIPTIONS)
}
SCHEDULED = {o.value for o in (EnsureOutcome.UNCHANGED, EnsureOutcome.ALREADY_COMPLETED)}


@st.composite
def world_message(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    topic = draw(st.sampled_from(list(TOPICS)))
    version = draw(st.integers(0, 5))
    unit = draw(st.sampled_from(UNITS))
    if topic == SOURCE_EVENTS.name:
        msg = draw(source_events())
        attrs = {
            "ExpiresOn": draw(DATES),
            "Booked": draw(st.integers(-10, 200) | st.floats(-1e300, 1e300)),
        }
        msg |= {
            "SourceGuid": draw(st.sampled_from(SOURCES)),
            "SourceType": draw(st.sampled_from(TYPES)),
            "Attributes": attrs,
        }
    elif topic == REMINDER_SETTINGS.name:
        msg = draw(reminder_settings())
        msg |= {
            "SettingGuid": draw(st.sampled_from(SETTINGS)),
            "SourceType": draw(st.sampled_from(TYPES)),
        }
        msg["TriggerKey"] = "Capacity" if msg["Threshold"] else "ExpiresOn"
        if msg["Threshold"]:
            msg["Threshold"]["MetricKey"] = "Booked"
    elif topic == BUSINESS_UNITS.name:
        msg = draw(business_units())
    else:
        msg = draw(report_subscriptions()) | {"SubscriptionGuid": SUBSCRIPTION}
    msg |= {"BusinessUnitId": unit, "Version": version}
    return topic, msg


@st.composite
def histories(draw: st.DrawFn) -> list[list[tuple[str, bytes, bool, dict[str, Any] | None]]]:
    records: list[tuple[str, bytes, bool, dict[str, Any] | None]] = []
    for _ in range(draw(st.integers(1, 25))):
        topic, msg = draw(world_message())
        records.append((topic, encode(msg), True, msg))
        if draw(st.integers(0, 4)) == 0:  # a replay
            records.append((topic, encode(msg), True, msg))
    for _ in range(draw(st.integers(0, 3))):
        topic = draw(st.sampled_from(list(TOPICS)))
        hostile = draw(st.sampled_from([b"{oops", b"null", b"[]"]))
        records.append((topic, hostile, False, None))
    order = draw(st.permutations(records))
    sizes = draw(st.lists(st.integers(1, 6), min_size=len(order), max_size=len(order)))
    batches, i = [], 0
    for size in sizes:
        if i >= len(order):
            break
        batches.append(list(order[i : i + size]))
        i += size
    return batches


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


async def _fresh(pool: asyncpg.Pool) -> None:
    await pool.execute(
        "TRUNCATE automation.scheduler, automation.sources, automation.reminder_settings, "
        "automation.business_units, automation.report_subscriptions, automation.threshold_states"
    )


@pytest.mark.timeout(900)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(batches=histories())
async def test_fuzzed_automation_inputs_end_in_a_fixpoint(
    pool: asyncpg.Pool,
    runtime: Runtime,
    batches: list[list[tuple[str, bytes, bool, dict[str, Any] | None]]],
) -> None:
    await _fresh(pool)
    inputs = Inputs(runtime)
    outcomes: list[tuple[int, str]] = []
    dlq = RecordingDlq()
    retries: list[float] = []

    async def no_retry(delay: float) -> None:
        retries.append(delay)
        raise AssertionError("retried as if the database were unavailable")

    metrics = Metrics()
    consumers = {
        name: ContractConsumer(
            contract,
            inputs.appliers[contract.model],
            dlq,  # type: ignore[arg-type]
            metrics.agents,
            sleep=no_retry,
            on_outcome=lambda ev, outcome, _r: outcomes.append((ev.index, outcome)),
        )
        for name, contract in TOPICS.items()
    }
    flat: list[tuple[str, bytes, bool, dict[str, Any] | None]] = []
    for batch in batches:
        by_topic: dict[str, list[IndexedEv]] = defaultdict(list)
        for topic, value, valid, msg in batch:
            note(f"#{len(flat)} {topic} {json.dumps(msg)[:300] if msg else value!r}")
            by_topic[topic].append(IndexedEv(len(flat), KeyedMsg(None, value, len(flat), topic)))
            flat.append((topic, value, valid, msg))
        for topic, events in by_topic.items():
            await consumers[topic].handle(events)  # type: ignore[arg-type]
    assert not retries
    got = dict(outcomes)
    assert len(outcomes) == len(got) == len(flat)
    for i, (_topic, _value, valid, _msg) in enumerate(flat):
        assert (got[i] == "dlq") == (not valid), (i, got[i])

    newest: dict[tuple[str, str], int] = {}
    for topic, _value, valid, msg in flat:
        if not valid or msg is None:
            continue
        if topic == REPORT_SUBSCRIPTIONS.name and msg["Cron"] is None and msg["Period"] is None:
            continue  # manual-only: asks for a run, leaves the subscription state alone
        ident = {
            SOURCE_EVENTS.name: "SourceGuid",
            REMINDER_SETTINGS.name: "SettingGuid",
            BUSINESS_UNITS.name: "BusinessUnitId",
            REPORT_SUBSCRIPTIONS.name: "SubscriptionGuid",
        }[topic]
        k = (
            topic,
            msg[ident]
            if topic != SOURCE_EVENTS.name
            else f"{msg['SourceType'].strip()}:{msg[ident]}",
        )
        newest[k] = max(newest.get(k, -1), msg["Version"])
    stored = {
        (BUSINESS_UNITS.name, str(r["business_unit_id"])): r["version"]
        for r in await pool.fetch("SELECT business_unit_id, version FROM automation.business_units")
    }
    stored |= {
        (REMINDER_SETTINGS.name, str(r["setting_guid"])): r["version"]
        for r in await pool.fetch("SELECT setting_guid, version FROM automation.reminder_settings")
    }
    stored |= {
        (REPORT_SUBSCRIPTIONS.name, str(r["subscription_guid"])): r["version"]
        for r in await pool.fetch(
            "SELECT subscription_guid, version FROM automation.report_subscriptions"
        )
    }
    stored |= {
        (SOURCE_EVENTS.name, f"{r['source_type']}:{r['source_guid']}"): r["version"]
        for r in await pool.fetch(
            "SELECT source_type, source_guid, version FROM automation.sources"
        )
    }
    assert stored == newest

    # Fixpoint: planning everything again at the same instant changes nothing.
    async with transaction(pool) as conn:
        again = await inputs.planner.for_units(
            conn, [uuid.UUID(u) for u in UNITS], runtime.clock.now()
        )
    assert again.deactivated == 0
    assert {r.outcome for r in again.ensured} <= SCHEDULED, [r.outcome for r in again.ensured]

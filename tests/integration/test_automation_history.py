"""Scheduler history on real PostgreSQL: an effect is never re-created after its record is
gone, and an operator's decision is terminal until an operator undoes it.

- Retention moves Completed rows into ``automation.scheduler_history`` in the statement that
  deletes them; Ensure consults it, so a key that was dispatched is never inserted again (an
  immediate notification whose target date is still ahead is named again by every replan).
- A console cancel (ReasonCode ManualCancel) is not reopened by an input or reconciliation
  of the source, setting, BU or report subscription, survives retention, and is undone only
  by the console's ``reopen``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import asyncpg
import pytest

from db import business_units as units_repo
from db import report_subscriptions as subscriptions_repo
from db import scheduler as scheduler_repo
from db.connector import transaction
from devkit.harness.automation import (
    T0,
    make_runtime,
    outbox,
    reminder,
    runner,
    setting_msg,
    source_msg,
    subscription_msg,
)
from devkit.harness.automation_inputs import BU, Inputs, rows, unit_msg
from devkit.wait import eventually
from streams.clock import SystemClock
from streams.console.perform import lookup, perform
from streams.contracts.automation import DispatchRequested
from streams.maintenance import RetentionMetrics, TableRetention, TableRetentionConfig
from streams.metrics import Metrics
from streams.runtime import Runtime
from streams.slices.automation.reconcile import REPORTS_PROVIDER, ReconcileConfig, Reconciliation
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

AHEAD = T0.date() + timedelta(days=90)  # a target date still ahead a month after T0
MONTH_LATER = T0 + timedelta(days=31)  # past the 30-day scheduler retention


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


def dispatched(events: Any) -> list[str]:
    return [
        DispatchRequested.model_validate_json(
            e["payload"], by_alias=True, by_name=False
        ).scheduler_key
        for e in events
    ]


async def retention(pool: asyncpg.Pool, as_of: datetime) -> int:
    job = TableRetention(
        pool, metrics=Metrics().family(RetentionMetrics), config=TableRetentionConfig()
    )
    result = await job.run_once(RunContext.at(as_of, clock=SystemClock()))
    return result.deleted["automation.scheduler"]


def asking(setting: uuid.UUID, **changes: Any) -> Any:
    return setting_msg(setting, offsets_days=[7], immediate_notification=True, **changes)


def doc(source: uuid.UUID, target: date = AHEAD, **changes: Any) -> Any:
    return source_msg(source, attributes={"ExpiresOn": target.isoformat()}, **changes)


async def act(pool: asyncpg.Pool, name: str, target: int, now: datetime) -> str:
    done = await perform(
        pool,
        lookup("automation/scheduler", name),
        str(target),
        "alice",
        "ticket 7",
        now,
        request_id=f"t-{uuid.uuid4().hex}",
    )
    return done.result.outcome


# --- finding: an immediate notification re-sent after retention deleted its row -------------


async def test_an_immediate_notification_is_not_sent_again_after_retention(
    database_url: str, pool: asyncpg.Pool, runtime: Runtime
) -> None:
    settings_ = [uuid.uuid4() for _ in range(2)]
    sources = [uuid.uuid4() for _ in range(3)]
    await Inputs(runtime).send(
        unit_msg(), *(asking(s) for s in settings_), *(doc(s) for s in sources)
    )
    first = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert first.completed == 6  # one immediate notification per setting and source
    immediate = sorted(dispatched(await outbox(pool)))
    assert all(k.endswith(":immediate") for k in immediate)

    # A month on, retention deletes the Completed immediate rows (scheduled at T0) ...
    assert await retention(pool, MONTH_LATER) == 6
    history = await pool.fetch(
        "SELECT scheduler_key, dispatch_result_json FROM automation.scheduler_history"
    )
    assert sorted(h["scheduler_key"] for h in history) == immediate
    assert all(h["dispatch_result_json"]["Topic"] for h in history)
    # ... and their target date is still ahead: every replan names their keys again. A
    # send-time change of both settings, an unrelated change of every source, and again.
    later = make_runtime(database_url, now=MONTH_LATER)
    try:
        inputs = Inputs(later)
        await inputs.send(*(asking(s, version=2, send_time_local=time(10)) for s in settings_))
        await inputs.send(*(doc(s, version=2, occurred_at=MONTH_LATER) for s in sources))
        run = await runner(later).run_once(RunContext.at(MONTH_LATER, clock=later.clock))
        assert run.completed == 0
        assert sorted(dispatched(await outbox(pool))) == immediate
        # Still history a month after that: the next prune and replan send nothing either.
        two_months = MONTH_LATER + timedelta(days=31)
        await retention(pool, two_months)
        await inputs.send(*(asking(s, version=3) for s in settings_))
        run = await runner(later).run_once(RunContext.at(two_months, clock=later.clock))
        assert sorted(dispatched(await outbox(pool))) == immediate
    finally:
        await later.close()


# --- finding: a console cancel silently undone by the next planning ---------------------------


async def _reminder_row(pool: asyncpg.Pool, key_tail: str) -> asyncpg.Record:
    [row] = [r for k, r in (await rows(pool)).items() if k.endswith(key_tail)]
    return row


async def test_a_console_cancel_survives_inputs_reconciliation_and_retention(
    database_url: str, pool: asyncpg.Pool, runtime: Runtime
) -> None:
    setting, source = uuid.uuid4(), uuid.uuid4()
    inputs = Inputs(runtime)
    await inputs.send(unit_msg(), setting_msg(setting, offsets_days=[7]), doc(source))
    row = await _reminder_row(pool, ":7")
    assert row["status_id"] == "Pending"
    assert await act(pool, "cancel", row["scheduler_id"], T0) == "changed"

    # An unrelated change of the source, a replay, a send-time change of the setting, a
    # time-zone change of the BU: the same key, the same InputHash. None reopens it.
    await inputs.send(doc(source, version=2, occurred_at=T0))
    await inputs.send(doc(source, version=2, occurred_at=T0))
    await inputs.send(setting_msg(setting, offsets_days=[7], version=2, send_time_local=time(11)))
    await inputs.send(unit_msg(zone="Europe/Paris", version=2))
    row = await _reminder_row(pool, ":7")
    assert (row["status_id"], row["status_reason_code"]) == ("Cancelled", "ManualCancel")

    due = datetime.combine(AHEAD - timedelta(days=7), time(12), tzinfo=UTC)
    assert (await runner(runtime).run_once(RunContext.at(due, clock=runtime.clock))).claimed == 0
    assert await outbox(pool) == []

    # Retention leaves an operator's cancel where it is (long after its ScheduledOn) ...
    await retention(pool, due + timedelta(days=60))
    row = await _reminder_row(pool, ":7")
    assert (row["status_id"], row["status_reason_code"]) == ("Cancelled", "ManualCancel")


async def test_report_reconciliation_does_not_reopen_a_cancelled_run(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    sub = uuid.uuid4()
    async with transaction(pool) as conn:
        await units_repo.upsert(conn, [unit_msg()], T0)
        await subscriptions_repo.upsert(conn, [subscription_msg(sub)], T0)
    inputs = Inputs(runtime)
    recon = Reconciliation(
        runtime,
        inputs.planner,
        ReconcileConfig(units=(BU,), batch_size=10, settle=timedelta(0)),
        providers=(REPORTS_PROVIDER,),
    )
    await recon.run_once(RunContext.at(T0, clock=runtime.clock))
    runs = await rows(pool)
    assert len(runs) == 7
    first = min(runs.values(), key=lambda r: r["scheduled_on"])
    assert await act(pool, "cancel", first["scheduler_id"], T0) == "changed"

    # The next reconciliation passes (and a new Version of the subscription) name it again.
    await recon.run_once(RunContext.at(T0 + timedelta(minutes=5), clock=runtime.clock))
    await inputs.send(subscription_msg(sub, version=2))
    after = (await rows(pool))[first["scheduler_key"]]
    assert (after["status_id"], after["status_reason_code"]) == ("Cancelled", "ManualCancel")
    run = await runner(runtime).run_once(
        RunContext.at(first["scheduled_on"] + timedelta(minutes=1), clock=runtime.clock)
    )
    assert first["scheduler_key"] not in dispatched(await outbox(pool))
    assert run.completed == 0


async def test_an_ensure_racing_the_prune_of_its_key_finds_the_history(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """Ensure reads the row, retention deletes it (and writes its record) before Ensure's
    lock: Ensure runs again on a new snapshot and finds the record, it never inserts."""
    candidate = reminder(uuid.uuid4(), uuid.uuid4(), scheduled_on=T0)
    async with transaction(pool) as conn:
        await scheduler_repo.ensure(conn, [candidate], T0)
    await pool.execute(
        "UPDATE automation.scheduler SET status_id = 'Completed', updated_on = $2, "
        'dispatch_result_json = \'{"Topic": "t"}\' WHERE scheduler_key = $1',
        candidate.key,
        T0,
    )
    pruner = await asyncpg.connect(database_url)
    ensurer = await asyncpg.connect(database_url)
    try:
        held = pruner.transaction()
        await held.start()
        assert await scheduler_repo.prune(pruner, MONTH_LATER, 10) == 1  # not committed yet
        async with ensurer.transaction():
            racing = asyncio.ensure_future(scheduler_repo.ensure(ensurer, [candidate], MONTH_LATER))
            await eventually(
                lambda: pool.fetchval(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ),
                timeout=10,
                what="Ensure waiting on the row the prune deletes",
            )
            await held.commit()
            [result] = await racing
        assert (result.outcome, result.status) == ("AlreadyCompleted", "Completed")
        assert "Topic" in str(result.dispatch_result)  # (a bare connection: JSON as text)
        assert await rows(pool) == {}
    finally:
        await pruner.close()
        await ensurer.close()


async def test_only_the_consoles_reopen_undoes_an_operators_cancel(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    setting, source = uuid.uuid4(), uuid.uuid4()
    inputs = Inputs(runtime)
    await inputs.send(unit_msg(), setting_msg(setting, offsets_days=[7]), doc(source))
    sid = (await _reminder_row(pool, ":7"))["scheduler_id"]
    assert await act(pool, "reopen", sid, T0) == "refused"  # Pending: nothing to reopen
    assert await act(pool, "cancel", sid, T0) == "changed"
    assert await act(pool, "reopen", sid, T0) == "changed"
    assert await act(pool, "reopen", sid, T0) == "unchanged"  # asked twice
    row = await _reminder_row(pool, ":7")
    assert (row["status_id"], row["status_reason_code"], row["support_action"]) == (
        "Pending",
        None,
        "reopen",
    )
    due = datetime.combine(AHEAD - timedelta(days=7), time(12), tzinfo=UTC)
    assert (await runner(runtime).run_once(RunContext.at(due, clock=runtime.clock))).completed == 1
    assert dispatched(await outbox(pool)) == [row["scheduler_key"]]
    audit = await pool.fetch(
        "SELECT action, outcome, state_before, state_after FROM ops.console_audit "
        "WHERE target = $1 ORDER BY id",
        str(sid),
    )
    assert [tuple(a) for a in audit] == [
        ("reopen", "refused", "Pending", "Pending"),
        ("cancel", "changed", "Pending", "Cancelled"),
        ("reopen", "changed", "Cancelled (ManualCancel)", "Pending"),
        ("reopen", "unchanged", "Pending", "Pending"),
    ]


async def test_a_system_cancellation_is_not_the_operators_to_reopen(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    """A row the system cancelled (a withdrawn manual run) is reactivated by its inputs, as
    the seed says; the console's reopen refuses it, and retention may delete it."""
    candidate = reminder(uuid.uuid4(), uuid.uuid4(), scheduled_on=T0)
    async with transaction(pool) as conn:
        await scheduler_repo.ensure(conn, [candidate], T0)
        await scheduler_repo.deactivate(conn, {candidate.key: "Withdrawn"}, "Cancelled", T0)
    sid = (await rows(pool))[candidate.key]["scheduler_id"]
    assert await act(pool, "reopen", sid, T0) == "refused"
    async with transaction(pool) as conn:
        [again] = await scheduler_repo.ensure(conn, [candidate], T0)
    assert (again.outcome, again.status) == ("Reactivated", "Pending")
    async with transaction(pool) as conn:
        await scheduler_repo.deactivate(conn, {candidate.key: "Withdrawn"}, "Cancelled", T0)
    assert await retention(pool, MONTH_LATER) == 1
    assert await pool.fetchval("SELECT count(*) FROM automation.scheduler_history") == 0
    async with transaction(pool) as conn:
        [back] = await scheduler_repo.ensure(conn, [candidate], MONTH_LATER)
    assert (back.outcome, back.status) == ("Inserted", "Pending")


def test_the_reopen_button_is_offered_for_an_operators_cancel_only() -> None:
    from streams.console.forms import action_forms

    def offered(**row: Any) -> bool:
        html = action_forms("automation/scheduler", {"scheduler_id": 7, **row}, "tok")
        return 'action="/console/actions/reopen"' in html

    assert offered(status_id="Cancelled", status_reason_code="ManualCancel")
    assert not offered(status_id="Cancelled", status_reason_code="Withdrawn")
    assert not offered(status_id="Pending", status_reason_code=None)


async def test_support_shows_the_record_of_a_pruned_key(
    database_url: str, pool: asyncpg.Pool, capsys: pytest.CaptureFixture[str]
) -> None:
    from streams import cli
    from streams.settings import Settings

    candidate = reminder(uuid.uuid4(), uuid.uuid4(), scheduled_on=T0)
    async with transaction(pool) as conn:
        await scheduler_repo.ensure(conn, [candidate], T0)
    await pool.execute(
        "UPDATE automation.scheduler SET status_id = 'Completed', updated_on = $2 "
        "WHERE scheduler_key = $1",
        candidate.key,
        T0,
    )
    assert await retention(pool, MONTH_LATER) == 1
    argv = ["automation", "show", candidate.key]
    settings = Settings(database_url=database_url)
    assert await asyncio.to_thread(cli.main, argv, settings=settings) == 0
    shown = capsys.readouterr().out
    assert '"pruned": true' in shown and candidate.key in shown

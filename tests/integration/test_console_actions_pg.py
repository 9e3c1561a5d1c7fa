"""Console actions on real PostgreSQL: each changes a row only in a state that allows it,
is refused with a clear message otherwise, changes nothing when asked again, and writes
who, when and why into ops.console_audit in the same statement; the CLI prints the same."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from streams import cli
from streams.console.forms import action_forms
from streams.console.perform import BadRequest, lookup, perform
from streams.settings import Settings

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


async def _reminder(pool: asyncpg.Pool, status: str = "Pending", attempts: int = 0) -> uuid.UUID:
    event_id, reminder_id = uuid.uuid4(), uuid.uuid4()
    await pool.execute(
        "INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at, "
        "time_zone, status, version, occurred_at) "
        "VALUES ($1, $2, $3, 'Appointment', $4, 'UTC', 'Planned', 1, $4)",
        event_id,
        uuid.uuid4(),
        uuid.uuid4(),
        NOW + timedelta(hours=2),
    )
    await pool.execute(
        "INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at, "
        "status, sent_at, attempts, next_attempt_at, last_error_code) "
        "VALUES ($1, $2, 60, $3, $4, $5, $6, $7, $8)",
        reminder_id,
        event_id,
        NOW + timedelta(hours=1),
        status,
        NOW if status == "Sent" else None,
        attempts,
        NOW + timedelta(hours=1) if attempts else datetime.min.replace(tzinfo=UTC),
        "ValueError" if attempts else None,
    )
    return reminder_id


async def _scheduler(pool: asyncpg.Pool, status: str, *, hold: bool = False) -> int:
    sid: int = await pool.fetchval(
        "INSERT INTO automation.scheduler (automation_type_id, trigger_type_id, scheduler_key, "
        "scheduled_on, input_hash, status_id, is_on_support_hold, retry_count, "
        "dispatch_result_json) "
        "VALUES ('ReportSubscription', 'ManualRun', $1, $2, $3, $4, $5, 3, $6::jsonb) "
        "RETURNING scheduler_id",
        f"test:{uuid.uuid4()}",
        NOW - timedelta(days=1),
        "a" * 64,
        status,
        hold,
        '{"topic": "t", "partition": 0, "offset": 1}' if status == "Completed" else None,
    )
    return sid


async def act(pool: asyncpg.Pool, listing: str, name: str, target: object) -> str:
    done = await perform(
        pool,
        lookup(listing, name),
        str(target),
        "alice",
        "ticket 42",
        NOW,
        request_id=f"t-{uuid.uuid4().hex}",  # each call a new request (asked again: unchanged)
    )
    return f"{done.result.outcome}: {done.text}"


async def test_reminder_cancel_retry_refusals_and_audit(pool: asyncpg.Pool) -> None:
    pending, sent, poison = (
        await _reminder(pool),
        await _reminder(pool, "Sent"),
        await _reminder(pool, attempts=3),
    )
    out = await act(pool, "calendar/reminders", "cancel", pending)
    assert out.startswith(
        f"changed: reminder {pending} cancelled: Pending -> Skipped (ManualCancel)"
    )
    assert (await act(pool, "calendar/reminders", "cancel", pending)).startswith("unchanged:")
    assert await act(pool, "calendar/reminders", "cancel", sent) == (
        f"refused: reminder {sent} is Sent: only Pending reminders can be cancelled"
    )
    out = await act(pool, "calendar/reminders", "retry", poison)
    assert out.startswith(
        f"changed: reminder {poison} retried: Pending, 3 failed attempts -> Pending"
    )
    row = await pool.fetchrow(
        "SELECT status, attempts, next_attempt_at, last_error_code FROM calendar.event_reminders "
        "WHERE reminder_id = $1",
        poison,
    )
    assert (row["status"], row["attempts"], row["last_error_code"]) == ("Pending", 0, None)
    assert await pool.fetchval(
        "SELECT next_attempt_at = '-infinity' FROM calendar.event_reminders WHERE reminder_id = $1",
        poison,
    )
    assert (await act(pool, "calendar/reminders", "retry", poison)).startswith("unchanged:")
    assert (await act(pool, "calendar/reminders", "retry", sent)).startswith("refused:")
    missing = uuid.uuid4()
    assert await act(pool, "calendar/reminders", "cancel", missing) == (
        f"not_found: no reminder {missing}"
    )
    with pytest.raises(BadRequest, match="not a reminder id"):
        await act(pool, "calendar/reminders", "cancel", "42; DROP TABLE x")
    statuses = dict(
        await pool.fetch(
            "SELECT reminder_id, status FROM calendar.event_reminders WHERE reminder_id = ANY($1)",
            [pending, sent],
        )
    )
    assert statuses == {pending: "Skipped", sent: "Sent"}  # the refusal changed nothing
    audit = await pool.fetch(
        "SELECT at, actor, action, listing, target, reason, outcome FROM ops.console_audit "
        "ORDER BY id"
    )
    assert [(a["action"], a["target"], a["outcome"]) for a in audit] == [
        ("cancel", str(pending), "changed"),
        ("cancel", str(pending), "unchanged"),
        ("cancel", str(sent), "refused"),
        ("retry", str(poison), "changed"),
        ("retry", str(poison), "unchanged"),
        ("retry", str(sent), "refused"),
        ("cancel", str(missing), "not_found"),
    ]
    assert {(a["at"], a["actor"], a["listing"], a["reason"]) for a in audit} == {
        (NOW, "alice", "calendar/reminders", "ticket 42")
    }


async def test_scheduler_cancel_resend_release_and_retry_key(pool: asyncpg.Pool) -> None:
    pending, completed = await _scheduler(pool, "Pending"), await _scheduler(pool, "Completed")
    held, processing = (
        await _scheduler(pool, "Failed", hold=True),
        await _scheduler(pool, "Pending"),
    )
    L = "automation/scheduler"
    assert (await act(pool, L, "cancel", pending)).startswith(
        f"changed: scheduler row {pending} cancelled: Pending -> Cancelled"
    )
    assert (await act(pool, L, "cancel", pending)).startswith("unchanged:")
    assert await act(pool, L, "cancel", completed) == (
        f"refused: scheduler row {completed} is Completed: only Pending and Failed scheduler "
        "rows can be cancelled"
    )
    assert (await act(pool, L, "resend", completed)).startswith(
        f"changed: scheduler row {completed} re-sent: Completed -> Pending"
    )
    row = await pool.fetchrow(
        "SELECT status_id, retry_count, support_action, due_on FROM automation.scheduler "
        "WHERE scheduler_id = $1",
        completed,
    )
    assert (row["status_id"], row["retry_count"], row["support_action"]) == (
        "Pending",
        0,
        "support-retry",
    )
    assert row["due_on"] <= NOW  # claimable by the next run
    assert (await act(pool, L, "resend", completed)).startswith("unchanged:")
    assert (await act(pool, L, "resend", processing)).startswith("refused:")
    assert (await act(pool, L, "retry", held)).startswith(
        f"changed: scheduler row {held} retried from a fresh ladder: Failed, on hold -> Pending"
    )
    row = await pool.fetchrow(
        "SELECT is_on_support_hold, retry_count, support_action FROM automation.scheduler "
        "WHERE scheduler_id = $1",
        held,
    )
    assert tuple(row) == (False, 0, "retry-key")
    assert (await act(pool, L, "release", held)).startswith("refused:")
    assert await pool.fetchval("SELECT count(*) FROM ops.console_audit") == 8


async def test_forms_offer_what_the_row_state_allows() -> None:
    pending = {"reminder_id": "r1", "status": "Pending", "attempts": 2}
    html = action_forms("calendar/reminders", pending, "tok")
    assert 'action="/console/actions/retry"' in html and 'action="/console/actions/cancel"' in html
    assert 'name="csrf" value="tok"' in html and 'name="target" value="r1"' in html
    assert action_forms("calendar/reminders", {"reminder_id": "r1", "status": "Sent"}, "t") == ""
    assert "log in" in action_forms("calendar/reminders", pending, None)
    held = {"scheduler_id": 7, "status": "Failed", "on_hold": True}
    names = [
        n
        for n in ("cancel", "resend", "retry", "release")
        if f'/actions/{n}"' in action_forms("automation/scheduler", held, "t")
    ]
    assert names == ["cancel", "retry", "release"]


async def test_the_cli_cancels_and_refuses_with_exit_codes(
    database_url: str,
    pool: asyncpg.Pool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("USER", "oncall")
    settings = Settings(database_url=database_url)
    target = await _reminder(pool)
    argv = ["rows", "cancel", "calendar/reminders", str(target), "--reason", "duplicate"]
    assert await asyncio.to_thread(cli.main, argv, settings=settings) == 0
    assert (
        f"reminder {target} cancelled: Pending -> Skipped (ManualCancel)" in capsys.readouterr().out
    )
    sent = await _reminder(pool, "Sent")
    argv = ["rows", "cancel", "calendar/reminders", str(sent), "--reason", "x"]
    assert await asyncio.to_thread(cli.main, argv, settings=settings) == 1
    assert "only Pending reminders can be cancelled" in capsys.readouterr().err
    assert (
        cli.main(
            ["rows", "resend", "calendar/reminders", str(sent), "--reason", "x"], settings=settings
        )
        == 2
    )
    assert "no action 'resend' on calendar/reminders" in capsys.readouterr().err
    actors = {r["actor"] for r in await pool.fetch("SELECT actor FROM ops.console_audit")}
    assert actors == {"oncall"}


async def test_automation_release_of_the_cli_is_audited_too(pool: asyncpg.Pool) -> None:
    from streams.slices.automation.support import SupportAction, put_back

    held = await _scheduler(pool, "Failed", hold=True)
    key = await pool.fetchval(
        "SELECT scheduler_key FROM automation.scheduler WHERE scheduler_id = $1", held
    )
    assert await put_back(pool, key, SupportAction.RELEASE, NOW, actor="gina", reason="fixed")
    assert await put_back(pool, key, SupportAction.RELEASE, NOW, actor="gina") is None
    audit = await pool.fetch(
        "SELECT actor, action, target, outcome, reason FROM ops.console_audit ORDER BY id"
    )
    assert [tuple(a) for a in audit] == [
        ("gina", "release", str(held), "changed", "fixed"),
        ("gina", "release", key, "refused", ""),
    ]

"""Repository of ``calendar.event_reminders``: one function per statement in
``db/queries/event_reminders.sql`` (the dispatch claim, its marks, the due state)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from db.connector import Connection, Executor
from db.console_audit import ActionOutcome, outcome_of
from db.outbox import OutboxColumns
from db.queries import sql
from streams.domain.calendar import CLOSED_EVENT_REASONS, NO_LONGER_SCHEDULED


@dataclass(frozen=True, slots=True)
class DueState:
    """Pending reminders after a dispatch run, as of its AsOf."""

    backlog: int
    """Due Pending rows (claimable or backing off after a failed attempt)."""
    ready: int
    """Of those, the rows claimable at AsOf (locked elsewhere, or beyond the run's budget)."""
    oldest_due: datetime | None
    """The earliest Pending DueAt."""
    next_wake: datetime | None
    """The earliest time after AsOf at which a Pending row becomes claimable."""


class ClaimedReminder(NamedTuple):
    """A due Pending reminder locked by a dispatch batch, with its event's state.

    A named tuple, not a frozen dataclass: a claim builds one per row from a slice of the
    statement's record, which ``_make`` does in 0.2-0.3 us where a frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field) took 1.4 us, about 4% of the
    dispatcher's CPU per row (docs/benchmarks.md)."""

    reminder_id: UUID
    event_id: UUID
    offset_minutes: int
    due_at: datetime
    attempts: int
    """Failed dispatch attempts before this claim (poison rows)."""
    tenant_id: UUID
    owner_user_id: UUID
    client_user_id: UUID | None
    kind: str
    start_at: datetime
    time_zone: str
    event_status: str
    appointment_id: UUID | None
    source_traceparent: str | None = None
    """The W3C traceparent of the input that stored the event's state (None: tracing was off
    at ingest, or the input carried none)."""


_CLAIMED = list(ClaimedReminder._fields)
_WIDTH = len(_CLAIMED)


@dataclass(frozen=True, slots=True)
class DueClaim:
    """What one dispatch claim locked, and what it saw around it."""

    rows: list[ClaimedReminder]
    seen: int
    """Claimable rows the claim's scan went through (claimed, or locked elsewhere)."""
    waiting: int
    """Due rows backing off (not claimable at the claim's AsOf)."""
    waiting_oldest: datetime | None
    next_wake: datetime | None
    """The earliest time after AsOf at which a Pending row becomes claimable."""

    @property
    def passed_over(self) -> int:
        """Rows SKIP LOCKED passed over: held by another transaction (row or its event)."""
        return max(0, self.seen - len(self.rows))


async def claim_due(
    conn: Connection, as_of: datetime, batch_size: int, exclude: Sequence[UUID]
) -> DueClaim:
    """Lock up to ``batch_size`` claimable reminders (with their event)."""
    rows = await conn.fetch(sql("event_reminders_claim_due"), as_of, batch_size, list(exclude))
    head = rows[0]  # the statement always returns a row (an empty claim: reminder_id NULL)
    # The claimed columns come first, in the dataclass's order (checked once per claim, so
    # each row is one slice, not a look-up per field).
    if list(head.keys())[:_WIDTH] != _CLAIMED:
        raise RuntimeError("event_reminders_claim_due: columns out of ClaimedReminder's order")
    make = ClaimedReminder._make
    claimed = [make(r[:_WIDTH]) for r in rows if r[0] is not None]
    return DueClaim(
        claimed,
        int(head["seen_due"]),
        int(head["waiting"]),
        head["waiting_oldest"],
        head["next_wake"],
    )


async def mark_dispatched(
    conn: Connection,
    transitions: Sequence[tuple[UUID, str, str | None]],
    as_of: datetime,
    outbox: OutboxColumns = ((), (), (), ()),
    failures: Sequence[tuple[UUID, datetime, str]] = (),
) -> tuple[int, int]:
    """Apply (reminder_id, 'Sent'|'Skipped', reason) to claimed rows, insert the batch's
    outbox rows (topics, keys, payloads, headers JSON) and record the failed attempts of
    its poison rows (reminder_id, retry time, error code; they stay Pending), in one
    statement; returns (rows changed, outbox rows inserted)."""
    if not transitions and not outbox[0] and not failures:
        return 0, 0
    row = await conn.fetchrow(
        sql("event_reminders_mark_dispatched"),
        [t[0] for t in transitions],
        [t[1] for t in transitions],
        [t[2] for t in transitions],
        as_of,
        *(list(column) for column in outbox),
        [f[0] for f in failures],
        [f[1] for f in failures],
        [f[2] for f in failures],
    )
    return int(row["marked"]), int(row["queued"])


async def due_state(conn: Connection, as_of: datetime) -> DueState:
    row = await conn.fetchrow(sql("event_reminders_due_state"), as_of)
    return DueState(
        backlog=int(row["backlog"]),
        ready=int(row["ready"]),
        oldest_due=row["oldest_due"],
        next_wake=row["next_wake"],
    )


async def status_count(conn: Connection, event_ids: Sequence[UUID]) -> dict[str, int]:
    rows = await conn.fetch(sql("event_reminders_status_count"), list(event_ids))
    return {str(r["status"]): int(r["n"]) for r in rows}


async def explain(conn: Connection, reminder_id: UUID) -> dict[str, Any] | None:
    row = await conn.fetchrow(sql("event_reminders_explain"), reminder_id)
    return dict(row) if row is not None else None


# The operators' console (streams/console): pages of one state after a keyset bound
# (due_at, reminder_id), before ``before``, of an event's tenant / owner (None: any).

ConsoleBound = tuple[datetime, UUID]


async def console_pending(
    db: Executor,
    bound: ConsoleBound,
    before: datetime,
    limit: int,
    tenant: UUID | None = None,
    owner: UUID | None = None,
) -> list[dict[str, Any]]:
    rows = await db.fetch(
        sql("event_reminders_console_pending"), *bound, before, limit, tenant, owner
    )
    return [dict(r) for r in rows]


async def console_retrying(
    db: Executor,
    bound: ConsoleBound,
    before: datetime,
    limit: int,
    tenant: UUID | None = None,
    owner: UUID | None = None,
) -> list[dict[str, Any]]:
    rows = await db.fetch(
        sql("event_reminders_console_retrying"), *bound, before, limit, tenant, owner
    )
    return [dict(r) for r in rows]


async def console_done(
    db: Executor,
    status: str,
    bound: ConsoleBound,
    before: datetime,
    limit: int,
    tenant: UUID | None = None,
    owner: UUID | None = None,
) -> list[dict[str, Any]]:
    """Sent or Skipped rows."""
    rows = await db.fetch(
        sql("event_reminders_console_done"), *bound, before, limit, tenant, owner, status
    )
    return [dict(r) for r in rows]


async def console_by_owner(
    db: Executor,
    state: str,
    bound: ConsoleBound,
    before: datetime,
    limit: int,
    tenant: UUID | None,
    owner: UUID,
) -> list[dict[str, Any]]:
    """One owner's rows of a console state (Pending, Retrying, Sent, Skipped)."""
    retrying = state == "Retrying"
    status = "Pending" if retrying else state
    rows = await db.fetch(
        sql("event_reminders_console_by_owner"),
        *bound,
        before,
        limit,
        tenant,
        owner,
        status,
        retrying,
    )
    return [dict(r) for r in rows]


async def console_counts(db: Executor, cap: int) -> dict[str, int]:
    """Rows by console state (Pending, Retrying, Sent, Skipped), each counted up to ``cap``."""
    rows = await db.fetch(sql("event_reminders_console_counts"), cap)
    return {str(r["state"]): int(r["n"]) for r in rows}


async def console_retry(
    conn: Connection, reminder_id: UUID, actor: str, reason: str, now: datetime, listing: str
) -> ActionOutcome:
    row = await conn.fetchrow(
        sql("event_reminders_console_retry"), reminder_id, actor, reason, now, listing
    )
    return outcome_of(row)


async def console_cancel(
    conn: Connection, reminder_id: UUID, actor: str, reason: str, now: datetime, listing: str
) -> ActionOutcome:
    row = await conn.fetchrow(
        sql("event_reminders_console_cancel"), reminder_id, actor, reason, now, listing
    )
    return outcome_of(row)


async def console_reopen(
    conn: Connection, reminder_id: UUID, actor: str, reason: str, now: datetime, listing: str
) -> ActionOutcome:
    closed = list(CLOSED_EVENT_REASONS)
    row = await conn.fetchrow(
        sql("event_reminders_console_reopen"),
        reminder_id,
        actor,
        reason,
        now,
        listing,
        [s.value for s in closed],
        [CLOSED_EVENT_REASONS[s] for s in closed],
        NO_LONGER_SCHEDULED,
    )
    return outcome_of(row)


@dataclass(frozen=True)
class LatenessMinute:
    """One minute of DueAt in ``event_reminders_lateness_minutes``."""

    minute: datetime
    sent: int
    lateness_p95_seconds: float | None
    lateness_max_seconds: float | None


async def lateness_minutes(
    db: Executor, since: datetime, until: datetime, limit: int
) -> list[LatenessMinute]:
    """Sent reminders per minute of DueAt in [since, until) and their lateness; at most
    ``limit`` rows read."""
    rows = await db.fetch(sql("event_reminders_lateness_minutes"), since, until, limit)
    return [
        LatenessMinute(
            minute=r["minute"],
            sent=r["sent"],
            lateness_p95_seconds=r["lateness_p95_seconds"],
            lateness_max_seconds=r["lateness_max_seconds"],
        )
        for r in rows
    ]

"""Calendar load as another team's producer sends it, and the reminders it must lead to.

The messages are built by hand from the wire contract (SPEC §2: PascalCase JSON, ISO-8601
instants with an offset, UUIDs as strings) and sent with a plain aiokafka producer, not
with the project's own models, so the test checks the contract and not our reading of it.

``expected_reminders`` is a pure function of the acknowledged messages: for each event its
newest Version decides; an open event wants one reminder per distinct offset with
DueAt = StartAt - offset, created only by a change whose OccurredAt is not after DueAt
(streams/domain/calendar.py ``insertable``). The load is generated so that timing cannot
change the answer: a reschedule or cancellation is only sent while every due time it
removes is at least ``margin`` seconds away, so the change is in PostgreSQL before the
dispatcher could claim the old reminder, even with a broker or worker down for a while.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

OPEN = {"Planned", "InProgress"}
ZONES = ["Europe/Moscow", "Asia/Ho_Chi_Minh", "UTC", "America/New_York"]


def wire_time(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds")


def parse_time(s: str) -> datetime:
    return datetime.fromisoformat(s).astimezone(UTC)


def calendar_message(
    *,
    event_id: str,
    tenant_id: str,
    owner_user_id: str,
    start_at: datetime,
    offsets: list[int],
    version: int,
    occurred_at: datetime,
    status: str = "Planned",
    kind: str = "Meeting",
    time_zone: str = "UTC",
    client_user_id: str | None = None,
    appointment_id: str | None = None,
) -> dict[str, Any]:
    """One pin.calendar.events.v1 payload, field by field as SPEC §2 names them."""
    return {
        "ContractVersion": 1,
        "EventId": event_id,
        "TenantId": tenant_id,
        "OwnerUserId": owner_user_id,
        "ClientUserId": client_user_id,
        "Kind": kind,
        "StartAt": wire_time(start_at),
        "TimeZone": time_zone,
        "Status": status,
        "ReminderOffsetsMinutes": offsets,
        "AppointmentId": appointment_id,
        "Version": version,
        "OccurredAt": wire_time(occurred_at),
    }


# ---------------------------------------------------------------------- expectation


@dataclass(frozen=True, order=True)
class Identity:
    """What makes a reminder: its event, its offset and its due time."""

    event_id: str
    offset_minutes: int
    due_at: datetime


def wanted(msg: dict[str, Any]) -> set[Identity]:
    if msg["Status"] not in OPEN:
        return set()
    start = parse_time(msg["StartAt"])
    return {
        Identity(msg["EventId"], m, start - timedelta(minutes=m))
        for m in set(msg["ReminderOffsetsMinutes"])
    }


def insertable(msg: dict[str, Any]) -> set[Identity]:
    occurred = parse_time(msg["OccurredAt"])
    return {i for i in wanted(msg) if i.due_at >= occurred}


@dataclass(frozen=True)
class Acked:
    """A message the broker acknowledged, and when (wall clock)."""

    payload: dict[str, Any]
    acked_at: datetime
    kind: str


@dataclass
class Expectation:
    expected: dict[Identity, datetime] = field(default_factory=dict)
    """Reminder → the OccurredAt of the change that created it."""
    forbidden: dict[Identity, str] = field(default_factory=dict)
    """Reminders some Version created and a newer one removed → 'cancelled' / 'superseded'."""
    min_margin_seconds: float = float("inf")
    """Least time between a removing change's acknowledgement and the due time it removed."""
    not_created: int = 0
    """Wanted reminders already due when their change happened (never created)."""
    final_versions: dict[str, int] = field(default_factory=dict)
    closed_events: int = 0

    def last_due(self) -> datetime:
        return max([*self.expected, *self.forbidden], key=lambda i: i.due_at).due_at


class AmbiguousLoad(AssertionError):
    """The load has a case whose outcome depends on timing; fix the generator."""


def expected_reminders(messages: Iterable[Acked]) -> Expectation:
    """The exact set of reminders the acknowledged messages must lead to (pure)."""
    by_event: dict[str, dict[int, Acked]] = {}
    for m in messages:
        versions = by_event.setdefault(m.payload["EventId"], {})
        seen = versions.get(m.payload["Version"])
        if seen is not None and seen.payload != m.payload:
            raise AmbiguousLoad(f"two states with Version {m.payload['Version']}")
        if seen is None or m.acked_at < seen.acked_at:
            versions[m.payload["Version"]] = m
    out = Expectation()
    for event_id, versions in by_event.items():
        ordered = [versions[v] for v in sorted(versions)]
        final = ordered[-1].payload
        out.final_versions[event_id] = final["Version"]
        out.closed_events += final["Status"] not in OPEN
        expected = insertable(final)
        out.not_created += len(wanted(final) - expected)
        # A reminder the final state wants but may not create, made by an older Version,
        # would exist or not depending on whether that Version was applied on its own.
        made_before = set().union(*(insertable(a.payload) for a in ordered[:-1]))
        if (wanted(final) - expected) & made_before:
            raise AmbiguousLoad(f"event {event_id}: a kept reminder is older than its change")
        for ident in expected:
            out.expected[ident] = parse_time(final["OccurredAt"])
        made: set[Identity] = set()
        for i, acked in enumerate(ordered):
            created = insertable(acked.payload)
            if i > 0:
                for ident in made - wanted(acked.payload):
                    margin = (ident.due_at - acked.acked_at).total_seconds()
                    out.min_margin_seconds = min(out.min_margin_seconds, margin)
            made |= created
        reason = "cancelled" if final["Status"] not in OPEN else "superseded"
        for ident in made - expected:
            out.forbidden[ident] = reason
    return out


# ---------------------------------------------------------------------- load generator


@dataclass
class EventState:
    event_id: str
    tenant_id: str
    owner_user_id: str
    time_zone: str
    kind: str
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def current(self) -> dict[str, Any]:
        return self.history[-1]


@dataclass(order=True)
class Action:
    at: float
    seq: int
    event_id: str = field(compare=False)
    kind: str = field(compare=False)


@dataclass
class LoadStats:
    attempts: int = 0
    acked: int = 0
    send_errors: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    skipped_changes: int = 0
    """Reschedules/cancellations not sent because the producer was too late for the margin."""


class CalendarLoad:
    """Steady calendar traffic: new events, reschedules, cancellations, replays, stale versions.

    ``rate`` new events per second; changes (reschedule/cancel) are planned only for events
    created in the first ``change_window`` seconds. ``reverts`` is the share of new events
    that go back to their first state: half are moved and moved back (same StartAt and
    offsets), half are cancelled and planned again, each with a newer Version. Randomness
    comes from ``seed``.
    """

    def __init__(
        self,
        *,
        seed: int,
        rate: float = 4.0,
        change_window: float = 90.0,
        margin: float = 75.0,
        reverts: float = 0.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.rate = rate
        self.change_window = change_window
        self.margin = margin
        self.reverts = reverts
        self._storm_back = 20.0
        self.events: dict[str, EventState] = {}
        self.acked: list[Acked] = []
        self.stats = LoadStats()
        self._actions: list[Action] = []
        self._seq = 0
        self._started: float | None = None
        self._credit = 0.0
        self._last_tick: float | None = None

    # ---------------------------------------------------------------- planning

    def _plan(self, delay: float, event_id: str, kind: str, now: float) -> None:
        self._seq += 1
        heapq.heappush(self._actions, Action(now + delay, self._seq, event_id, kind))

    def _new_event(self, now_wall: datetime, now: float, in_window: bool) -> dict[str, Any]:
        rng = self.rng
        ev = EventState(
            event_id=str(uuid.uuid4()),
            tenant_id=str(uuid.uuid4()),
            owner_user_id=str(uuid.uuid4()),
            time_zone=rng.choice(ZONES),
            kind=rng.choice(["Meeting", "Call", "Visit"]),
        )
        self.events[ev.event_id] = ev
        plan = rng.random() if in_window else 1.0
        plan_reverts = 0.28 + self.reverts / 2
        if plan < 0.12:  # rescheduled once
            start, offsets = now_wall + timedelta(seconds=rng.uniform(150, 190)), [0, 1]
            self._plan(rng.uniform(1, 5), ev.event_id, "reschedule-near", now)
        elif plan < 0.17:  # rescheduled twice: far, then near
            start, offsets = now_wall + timedelta(seconds=rng.uniform(150, 190)), [0, 1]
            self._plan(rng.uniform(1, 3), ev.event_id, "reschedule-far", now)
        elif plan < 0.25:
            start, offsets = now_wall + timedelta(seconds=rng.uniform(150, 190)), [0, 1]
            self._plan(rng.uniform(1, 5), ev.event_id, "cancel", now)
        elif plan < 0.28:
            start, offsets = now_wall + timedelta(seconds=rng.uniform(150, 190)), [0, 1]
            self._plan(rng.uniform(1, 5), ev.event_id, "complete", now)
        elif plan < plan_reverts:  # moved, then moved back to the first start time
            start, offsets = now_wall + timedelta(seconds=rng.uniform(150, 190)), [0, 1]
            self._plan(rng.uniform(1, 4), ev.event_id, "move-then-back", now)
        elif plan < plan_reverts + self.reverts / 2:  # Planned -> Cancelled -> Planned
            start, offsets = now_wall + timedelta(seconds=rng.uniform(150, 190)), [0, 1]
            self._plan(rng.uniform(1, 4), ev.event_id, "cancel-then-back", now)
        else:  # plain: due during the run; offset 5 (and 1 for a near start) is already past
            start = now_wall + timedelta(seconds=rng.uniform(20, 140))
            offsets = rng.choice([[0], [1], [0, 1], [1, 5], [0, 1, 5], [5]])
            if rng.random() < 0.05:
                self._plan(rng.uniform(1, 5), ev.event_id, "stale", now)
            elif rng.random() < 0.05:
                self._plan(rng.uniform(1, 5), ev.event_id, "replay-same", now)
        status = "InProgress" if rng.random() < 0.1 else "Planned"
        msg = self._state(ev, start, offsets, 1, now_wall, status)
        return msg

    def _state(
        self,
        ev: EventState,
        start: datetime,
        offsets: list[int],
        version: int,
        occurred: datetime,
        status: str = "Planned",
    ) -> dict[str, Any]:
        msg = calendar_message(
            event_id=ev.event_id,
            tenant_id=ev.tenant_id,
            owner_user_id=ev.owner_user_id,
            start_at=start,
            offsets=offsets,
            version=version,
            occurred_at=occurred,
            status=status,
            kind=ev.kind,
            time_zone=ev.time_zone,
        )
        ev.history.append(msg)
        return msg

    def _change(self, action: Action, now_wall: datetime, now: float) -> dict[str, Any] | None:
        ev = self.events[action.event_id]
        rng = self.rng
        cur = ev.current
        version = cur["Version"] + rng.choice([1, 1, 2, 3])
        if action.kind in {"stale", "replay-same", "replay-old"}:
            if action.kind == "stale":  # older Version, different content: must change nothing
                return {**ev.history[0], "Version": 0, "Status": "Cancelled"}
            if action.kind == "replay-same":
                return dict(cur)
            return dict(ev.history[0])
        if action.kind in {"reschedule-far", "move-then-back", "storm-move"}:
            start, offsets = now_wall + timedelta(seconds=rng.uniform(150, 190)), [0, 1]
            status = cur["Status"]
        elif action.kind == "back":  # the first state again, under a newer Version
            first = ev.history[0]
            start, offsets = parse_time(first["StartAt"]), first["ReminderOffsetsMinutes"]
            status = first["Status"]
        elif action.kind == "reschedule-near":
            start = now_wall + timedelta(seconds=rng.uniform(25, 110))
            offsets, status = rng.choice([[0], [0, 1], [1]]), cur["Status"]
        else:  # cancel / complete: same time, closed
            start, offsets = parse_time(cur["StartAt"]), cur["ReminderOffsetsMinutes"]
            status = "Completed" if action.kind == "complete" else "Cancelled"
        candidate = {**cur, "StartAt": wire_time(start), "ReminderOffsetsMinutes": offsets}
        made = set().union(*(insertable(h) for h in ev.history))
        removed = made - wanted({**candidate, "Status": status})
        if any((i.due_at - now_wall).total_seconds() < self.margin for i in removed):
            self.stats.skipped_changes += 1  # too late to be unambiguous: leave the event as is
            return None
        msg = self._state(ev, start, offsets, version, now_wall, status)
        if action.kind == "reschedule-far":
            self._plan(rng.uniform(1, 3), ev.event_id, "reschedule-near", now)
        elif action.kind in {"move-then-back", "cancel-then-back"}:
            self._plan(rng.uniform(1, 4), ev.event_id, "back", now)
        elif action.kind == "storm-move":
            self._plan(self._storm_back + rng.uniform(0, 5), ev.event_id, "back", now)
        if rng.random() < 0.5:
            self._plan(rng.uniform(2, 10), ev.event_id, "replay-old", now)
        return msg

    def due(self, now: float, now_wall: datetime) -> list[tuple[str, dict[str, Any]]]:
        """The messages to send at ``now`` (monotonic), in order."""
        if self._started is None:
            self._started = self._last_tick = now
        assert self._last_tick is not None
        self._credit += (now - self._last_tick) * self.rate
        self._last_tick = now
        out: list[tuple[str, dict[str, Any]]] = []
        in_window = now - self._started < self.change_window
        while self._credit >= 1:
            self._credit -= 1
            out.append(("create", self._new_event(now_wall, now, in_window)))
        while self._actions and self._actions[0].at <= now:
            action = heapq.heappop(self._actions)
            msg = self._change(action, now_wall, now)
            if msg is not None:
                out.append((action.kind, msg))
        return out

    def storm(self, now: float, count: int, over: float, back_after: float = 20.0) -> int:
        """Plan ``count`` moves spread over ``over`` seconds from ``now`` (monotonic), for the
        newest open events not changed yet, each moved back ``back_after`` seconds (plus up
        to 5) later: a worker killed between the commit of a move and its cache write has
        its revert come after it restarted. Returns how many were planned (each is still
        subject to the margin when it is sent)."""
        soonest = datetime.now(UTC) + timedelta(seconds=self.margin + over + 5)
        fresh = [
            ev
            for ev in reversed(self.events.values())
            if len(ev.history) == 1
            and ev.current["Status"] in OPEN
            and all(i.due_at > soonest for i in insertable(ev.current))
        ][:count]
        self._storm_back = back_after
        for i, ev in enumerate(fresh):
            self._plan(over * i / max(1, len(fresh)), ev.event_id, "storm-move", now)
        return len(fresh)

    def flush_pending_actions(
        self, now: float, now_wall: datetime
    ) -> list[tuple[str, dict[str, Any]]]:
        """At the end of the load: send the replays still planned; drop planned changes."""
        out = []
        for action in sorted(self._actions):
            if action.kind in {"stale", "replay-same", "replay-old"}:
                msg = self._change(action, now_wall, now)
                if msg is not None:
                    out.append((action.kind, msg))
        self._actions.clear()
        return out


async def run_load(
    load: CalendarLoad,
    bootstrap: str,
    topic: str,
    *,
    seconds: float,
    tick: float = 0.1,
) -> None:
    """Send ``load`` for ``seconds`` with a plain idempotent aiokafka producer.

    Each message is sent and acknowledged before the next (per-key order holds across
    retries); a failed send is retried with the same bytes until acknowledged, so a message
    whose first attempt did reach the broker is at worst a replay.
    """
    producer: AIOKafkaProducer | None = None
    failures_in_row = 0

    async def send(kind: str, msg: dict[str, Any]) -> None:
        nonlocal producer, failures_in_row
        raw = json.dumps(msg).encode()
        while True:
            load.stats.attempts += 1
            try:
                if producer is None:
                    producer = AIOKafkaProducer(
                        bootstrap_servers=bootstrap,
                        acks="all",
                        enable_idempotence=True,
                        request_timeout_ms=10_000,
                        retry_backoff_ms=200,
                    )
                    await producer.start()
                await producer.send_and_wait(topic, raw, key=msg["EventId"].encode())
                failures_in_row = 0
                break
            except (KafkaError, OSError, TimeoutError):
                load.stats.send_errors += 1
                failures_in_row += 1
                if failures_in_row % 5 == 0 and producer is not None:
                    # A producer stuck on a dead broker connection: start a fresh one.
                    stale, producer = producer, None
                    await asyncio.shield(stale.stop())
                await asyncio.sleep(0.5)
        load.stats.acked += 1
        load.stats.by_kind[kind] += 1
        load.acked.append(Acked(msg, datetime.now(UTC), kind))

    start = time.monotonic()
    try:
        while (now := time.monotonic()) - start < seconds:
            for kind, msg in load.due(now, datetime.now(UTC)):
                await send(kind, msg)
            await asyncio.sleep(tick)
        for kind, msg in load.flush_pending_actions(time.monotonic(), datetime.now(UTC)):
            await send(kind, msg)
    finally:
        if producer is not None:
            await producer.stop()

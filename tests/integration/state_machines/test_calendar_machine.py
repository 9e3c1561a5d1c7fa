"""Every calendar mechanism against every other (seed 000), as a hypothesis state machine on
real PostgreSQL: event states (new Versions, reverts, replays, Versions out of order) through
the events agent's applier on two workers whose clocks are off; calendar dispatch and table
retention through each worker's real timer registry at arbitrary instants; the console's
cancel and retry, and the same request sent again; pausing and resuming schedules, and
retention slots that fail or are handed back. The reference model (calendar_model.py) says
which reminders must exist; the outbox is the output.

Each check has its own test (``CHECKS``), so a failure names what it is."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from unittest.mock import MagicMock

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule, run_state_machine_as_test

from streams.contracts.calendar import CalendarEventChanged, EventStatus
from streams.input.consumer import Decoded
from streams.slices.calendar.events import CalendarEventsApplier
from tests.integration.state_machines.calendar_model import (
    EVENTS,
    OWNER,
    TENANT,
    CalendarModel,
    EventState,
    Identity,
)
from tests.integration.state_machines.machine import RETENTION, SliceMachine, W
from tests.integration.state_machines.world import (
    T0,
    TIMEOUT,
    Record,
    Shared,
    Worker,
    machine_settings,
    reset,
)

pytestmark = pytest.mark.integration

DISPATCH = "calendar-dispatch"
ENV = {
    "TIMER_TABLE_RETENTION_INTERVAL_SECONDS": "600",
    "TIMER_TABLE_RETENTION_RETRY_BACKOFF_SECONDS": "1",
    # Jobs no check is about, off: each step costs less, so more examples fit.
    "TIMER_OUTBOX_RETENTION_ENABLED": "false",
    "TIMER_SLOT_PRUNE_ENABLED": "false",
    "TIMER_WORKER_HEARTBEAT_ENABLED": "false",
}
SKEWS = st.tuples(st.sampled_from([0, 90, 600]), st.sampled_from([0, -90, 600])).map(
    lambda s: (timedelta(seconds=s[0]), timedelta(seconds=s[1]))
)
STATUSES = st.sampled_from(["Planned", "Planned", "InProgress", "Cancelled", "Completed"])
STARTS = st.sampled_from([20, 120, 26 * 60, 3 * 1440, 40 * 1440]).map(
    lambda m: T0 + timedelta(minutes=m)
)
OFFSETS = st.sampled_from([(15,), (60,), (15, 60), (15, 1440)])
STATES = st.builds(EventState, STATUSES, STARTS, OFFSETS)
DELAY = st.sampled_from([False, False, False, True])
MOSTLY = st.sampled_from([True, True, True, False])
EVENT = st.sampled_from(EVENTS)


def message(event: str, version: int, state: EventState, occurred_at: datetime) -> Any:
    return CalendarEventChanged(
        event_id=event,
        tenant_id=TENANT,
        owner_user_id=OWNER,
        kind="Meeting",
        start_at=state.start,
        time_zone="UTC",
        status=EventStatus(state.status),
        reminder_offsets_minutes=list(state.offsets),
        version=version,
        occurred_at=occurred_at,
    )


class CalendarMachine(SliceMachine):
    name = "calendar"
    LISTING = "calendar/reminders"
    WAKE = (DISPATCH,)
    PAUSABLE = (DISPATCH, RETENTION)
    CLUSTER_ONCE = (RETENTION,)

    def __init__(self) -> None:
        super().__init__()
        self.model = CalendarModel()
        self.versions: dict[str, int] = {}
        # event -> (version, state, occurred at) of every message made
        self.made: dict[str, list[tuple[int, EventState, datetime]]] = {}
        self.delayed: list[tuple[str, int, EventState, datetime]] = []
        self.appliers: dict[int, CalendarEventsApplier] = {}

    @initialize(skews=SKEWS, states=st.tuples(STATES, STATES))
    def start(
        self, skews: tuple[timedelta, timedelta], states: tuple[EventState, EventState]
    ) -> None:
        """The world as it is when the machine starts: both events delivered; the rules
        change it from there."""
        self.run(reset(self.pool))
        self.workers = [
            Worker(f"w{i}", rt, self.true, s, ENV, ("calendar",), self.runs)
            for i, (rt, s) in enumerate(zip(self.shared.runtimes, skews, strict=True))
        ]
        self.tick((0, 1))  # the baseline: nothing is due yet
        for i, (event, state) in enumerate(zip(EVENTS, states, strict=True)):
            self._new_version(i, str(event), state, delay=False)
        self.after()

    def classify(self, record: Record) -> tuple[Any, datetime | None]:
        p = record.payload
        offset = int(p["OffsetMinutes"])
        due = datetime.fromisoformat(p["StartAt"]) - timedelta(minutes=offset)
        return (str(p["EventId"]), offset, due), due

    def dues(self) -> list[datetime]:
        return self.model.dues()

    def accepted(self, action: str, request: int, identity: Any) -> None:
        if action == "cancel":
            self.model.cancelled[identity] = self.seq + 1

    def _applier(self, w: int) -> CalendarEventsApplier:
        if w not in self.appliers:
            worker = self.workers[w]
            self.appliers[w] = CalendarEventsApplier(
                worker.runtime, None, on_due=worker.installed("calendar")
            )
        return self.appliers[w]

    def _deliver(
        self, w: int, event: str, version: int, state: EventState, occurred_at: datetime
    ) -> None:
        """The events agent of worker ``w`` applies the state; its loops serve the wake-up."""
        msg = message(event, version, state, occurred_at)
        self.run(self._applier(w)([Decoded(MagicMock(), msg)]))
        self.model.deliver(event, version, state, occurred_at, self.seq + 1)
        self.tick((w,))

    # --- inputs -----------------------------------------------------------------------------

    def _new_version(self, w: int, key: str, state: EventState, delay: bool) -> None:
        self.versions[key] = version = self.versions.get(key, 0) + 1
        now = self.true.now()
        self.made.setdefault(key, []).append((version, state, now))
        if delay:
            self.delayed.append((key, version, state, now))
        else:
            self._deliver(w, key, version, state, now)

    @rule(w=W, event=EVENT, state=STATES, delay=DELAY)
    def change_event(self, w: int, event: Any, state: EventState, delay: bool) -> None:
        self._new_version(w, str(event), state, delay)
        self.after()

    @rule(w=W, i=st.integers(0, 9))
    def deliver_late(self, w: int, i: int) -> None:
        """A message held back arrives now (after newer Versions, maybe)."""
        if self.delayed:
            self._deliver(w, *self.delayed.pop(i % len(self.delayed)))
        self.after()

    @rule(w=W, event=EVENT, i=st.integers(0, 9), revert=st.booleans())
    def replay_or_revert(self, w: int, event: Any, i: int, revert: bool) -> None:
        """A message made earlier again (a replay), or its state under a new Version, as it
        is now (a revert)."""
        key = str(event)
        made = self.made.get(key)
        if made:
            version, state, occurred = made[i % len(made)]
            if revert:
                self.versions[key] = version = self.versions[key] + 1
                occurred = self.true.now()
                made.append((version, state, occurred))
            self._deliver(w, key, version, state, occurred)
        self.after()

    def _act_on_a_row(self, w: int, action: str, i: int, offered: bool) -> None:
        """An operator's action on a row the console offers it for (or, now and then, on any
        row: a stale page). Nothing offered: the operator does nothing."""
        rows = self.run(
            self.pool.fetch(
                "SELECT reminder_id, event_id, offset_minutes, due_at, status, attempts "
                "FROM calendar.event_reminders ORDER BY reminder_id"
            )
        )
        if offered:
            rows = [
                r
                for r in rows
                if r["status"] == "Pending" and (action == "cancel" or r["attempts"] > 0)
            ]
        if rows:
            r = rows[i % len(rows)]
            ident: Identity = (str(r["event_id"]), r["offset_minutes"], r["due_at"])
            self.request(w, action, str(r["reminder_id"]), ident)
        self.after()

    @rule(w=W, i=st.integers(0, 15), offered=MOSTLY)
    def cancel(self, w: int, i: int, offered: bool) -> None:
        self._act_on_a_row(w, "cancel", i, offered)

    @rule(w=W, i=st.integers(0, 15), offered=MOSTLY)
    def retry(self, w: int, i: int, offered: bool) -> None:
        self._act_on_a_row(w, "retry", i, offered)

    # --- invariants -------------------------------------------------------------------------

    def check_once(self) -> None:
        """A reminder is sent at most once (exactly one ReminderDueEvent per row)."""
        for ident in {i for _, _, i, _ in self.sent}:
            steps = self.records_of(ident)
            assert len(steps) <= 1, f"{ident} sent {len(steps)} times (steps {steps})"

    def check_f5(self) -> None:
        """Finding 5: never sent before its DueAt in database (true) time (DueAt < AsOf)."""
        for step, record, _, due in self.sent:
            assert due is not None and record.at > due, (
                f"finding 5: reminder {record.payload['ReminderId']} written at {record.at} (step {step}), "
                f"DueAt {due}"
            )

    def check_cancel(self) -> None:
        """An operator's cancel stands: no input makes the reminder Pending again."""
        for step, record, ident, _ in self.sent:
            cancelled = self.model.cancelled.get(ident)
            assert cancelled is None or step < cancelled, (
                f"reminder {record.payload['ReminderId']} sent at step {step} after its cancel "
                f"at step {cancelled}"
            )

    def check_wanted(self) -> None:
        """Sent only while its event's current state wants it (seed 000: closed → Skipped)."""
        for step, record, ident, _ in self.sent:
            if step == self.seq:
                assert ident in self.model.wanted(), (
                    f"reminder {record.payload['ReminderId']} sent at step {step}, "
                    "not wanted by its event's state"
                )

    def settle(self) -> None:
        """Time passes every DueAt and the dispatchers run: every reminder that had to be
        sent is, and no Pending reminder is left behind."""
        self.pass_every_due()
        for ident in self.model.obligations():
            assert self.records_of(ident), f"{ident} was due and wanted throughout, never sent"
        stuck = self.run(
            self.pool.fetch(
                "SELECT reminder_id, due_at FROM calendar.event_reminders "
                "WHERE status = 'Pending' AND due_at < $1",
                self.true.now() - timedelta(hours=1),
            )
        )
        assert not stuck, f"reminders stuck at the settle point: {[tuple(r) for r in stuck]}"


CHECKS = {
    "f4_pause_and_slot_retry": frozenset({"f4"}),
    "f5_fast_clock": frozenset({"f5"}),
    "cancel_respected": frozenset({"cancel"}),
    "settles": frozenset({"once", "wanted", "settle"}),
}


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("check", sorted(CHECKS))
def test_calendar(check: str, shared: Shared) -> None:
    machine = CalendarMachine.for_test(check, CHECKS[check], shared)
    run_state_machine_as_test(machine, settings=machine_settings())

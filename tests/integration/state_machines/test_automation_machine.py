"""Every automation mechanism against every other (seed 003), as a hypothesis state machine on
real PostgreSQL: input messages (new Versions, reverts, replays, Versions out of order) through
the agents' appliers on two workers whose clocks are off; the runner, stale cleanup,
reconciliation and table retention through each worker's real timer registry at arbitrary
instants; a worker that dies after its claim; every console action on scheduler rows, and the
same request sent again; pausing and resuming schedules, and timer slots that fail or are
handed back. The reference model (automation_model.py) says which effects must exist; the
outbox is the output.

Each finding of the review has its own invariant and its own test (``CHECKS``), so a failure
names the finding it is; ``test_automation[settles]`` checks the rest (at most once, only while
wanted; at a settle point: sent when due and wanted throughout, no row stuck)."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule, run_state_machine_as_test

from streams.contracts.automation import (
    BusinessUnitChanged,
    ReminderSettingChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.input.consumer import Decoded
from streams.slices.automation.inputs import (
    PlanningApplier,
    SettingsWriter,
    SourcesWriter,
    UnitsWriter,
)
from tests.integration.state_machines.automation_model import (
    BU,
    IMMEDIATE,
    SETTING,
    SOURCES,
    ZONES,
    Model,
    SettingState,
    SourceState,
    State,
    UnitState,
    identity_of,
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

SCHEDULER = "automation-scheduler"
CLEANUP = "automation-stale-cleanup"
RECONCILE = "automation-reconcile-reminders"
# Production settings a deployment may choose: the hourly jobs every 10 minutes, so that they
# run within a machine's few dozen steps; every missed slot coalesced into one run.
ENV = {
    "TIMER_AUTOMATION_RECONCILE_REMINDERS_INTERVAL_SECONDS": "600",
    "TIMER_AUTOMATION_RECONCILE_REMINDERS_MISFIRE": "coalesce",
    "TIMER_TABLE_RETENTION_INTERVAL_SECONDS": "600",
    # A failed slot is tried again a second later (within its 10 minutes).
    "TIMER_AUTOMATION_RECONCILE_REMINDERS_RETRY_BACKOFF_SECONDS": "1",
    "TIMER_TABLE_RETENTION_RETRY_BACKOFF_SECONDS": "1",
    # Jobs no finding is about, off: each step costs less, so more examples fit.
    "TIMER_OUTBOX_RETENTION_ENABLED": "false",
    "TIMER_SLOT_PRUNE_ENABLED": "false",
    "TIMER_WORKER_HEARTBEAT_ENABLED": "false",
    "TIMER_AUTOMATION_RECONCILE_REPORTS_ENABLED": "false",
}
SKEWS = st.tuples(st.sampled_from([0, 90, 600]), st.sampled_from([0, -90, 600])).map(
    lambda s: (timedelta(seconds=s[0]), timedelta(seconds=s[1]))
)
DAY0 = T0.date()
EXPIRIES = st.sampled_from([2, 9, 45, 80, None]).map(
    lambda d: None if d is None else DAY0 + timedelta(days=d)
)
OFFSETS = st.sampled_from([(1,), (3,), (1, 3)])
SEND_TIMES = st.sampled_from([time(9, 0), time(10, 30)])
# The rows the console offers each action for (streams/slices/automation/actions.py).
OFFERED = {
    "cancel": lambda status, held: status in ("Pending", "Failed"),
    "resend": lambda status, held: status == "Completed",
    "retry": lambda status, held: held,
    "release": lambda status, held: held,
}
# Most messages arrive at once; some are held back and arrive after newer Versions.
DELAY = st.sampled_from([False, False, False, True])
ENTITIES = st.sampled_from(["unit", "setting", *(f"source:{s}" for s in SOURCES)])

MOSTLY = st.sampled_from([True, True, True, False])
SETTINGS_ = st.builds(SettingState, OFFSETS, SEND_TIMES, MOSTLY, st.booleans())
SOURCES_ = st.builds(SourceState, MOSTLY, EXPIRIES)


def message(entity: str, version: int, state: State, now: Any) -> Any:
    if isinstance(state, UnitState):
        return BusinessUnitChanged(business_unit_id=BU, time_zone_id=state.zone, version=version)
    if isinstance(state, SettingState):
        return ReminderSettingChanged(
            setting_guid=SETTING,
            business_unit_id=BU,
            source_type="Doc",
            trigger_type=TriggerType.DATE_BASED,
            trigger_key="ExpiresOn",
            offsets_days=list(state.offsets),
            send_time_local=state.send_time,
            active=state.active,
            immediate_notification=state.immediate,
            version=version,
        )
    attrs = {"ExpiresOn": state.expires.isoformat()} if state.expires else {}
    return SourceEntityChanged(
        source_type="Doc",
        source_guid=entity.split(":", 1)[1],
        business_unit_id=BU,
        version=version,
        occurred_at=now,
        is_active=state.active,
        attributes=attrs,
    )


class AutomationMachine(SliceMachine):
    name = "automation"
    LISTING = "automation/scheduler"
    WAKE = (SCHEDULER, CLEANUP)
    PAUSABLE = (SCHEDULER, RECONCILE, RETENTION)
    CLUSTER_ONCE = (RECONCILE, RETENTION)

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.versions: dict[str, int] = {}
        self.delivered: dict[str, list[tuple[int, State]]] = {}
        self.delayed: list[tuple[str, int, State]] = []
        self.appliers: dict[tuple[int, type], Any] = {}

    # --- the world ------------------------------------------------------------------------

    @initialize(
        skews=SKEWS,
        zone=st.sampled_from(ZONES),
        setting=SETTINGS_,
        sources=st.permutations(SOURCES).flatmap(
            lambda order: st.tuples(st.just(order), st.tuples(SOURCES_, SOURCES_))
        ),
    )
    def start(
        self,
        skews: tuple[timedelta, timedelta],
        zone: str,
        setting: SettingState,
        sources: tuple[Any, tuple[SourceState, SourceState]],
    ) -> None:
        """The world as it is when the machine starts: the unit, the setting and the two
        sources delivered (in a drawn order); the rules change it from there."""
        self.run(reset(self.pool))
        self.workers = [
            Worker(f"w{i}", rt, self.true, s, ENV, ("automation",), self.runs)
            for i, (rt, s) in enumerate(zip(self.shared.runtimes, skews, strict=True))
        ]
        self.tick((0, 1))  # the baseline: nothing is due yet
        self._deliver(0, "unit", self._next("unit"), UnitState(zone))
        self._deliver(0, "setting", self._next("setting"), setting)
        order, states = sources
        for i, (guid, state) in enumerate(zip(order, states, strict=True)):
            self._deliver(i, f"source:{guid}", self._next(f"source:{guid}"), state)
        self.after()

    def classify(self, record: Record) -> tuple[Any, datetime | None]:
        ident = identity_of(record.key)
        return ident, self.model.wanted().get(ident) if ident else None

    def dues(self) -> list[datetime]:
        return [d for d in self.model.wanted().values() if d is not None]

    def accepted(self, action: str, request: int, identity: Any) -> None:
        if action == "cancel":
            self.model.cancelled[identity] = self.seq + 1
        elif action == "resend":
            self.model.resends.setdefault(identity, {}).setdefault(request, self.seq + 1)

    def _next(self, entity: str) -> int:
        self.versions[entity] = self.versions.get(entity, 0) + 1
        return self.versions[entity]

    def _applier(self, w: int, kind: type) -> Any:
        if (w, kind) not in self.appliers:
            worker = self.workers[w]
            t = worker.installed("automation")
            writer = {
                SourceEntityChanged: SourcesWriter,
                ReminderSettingChanged: SettingsWriter,
                BusinessUnitChanged: UnitsWriter,
            }[kind](t.planner)
            self.appliers[(w, kind)] = PlanningApplier[Any](worker.runtime, writer, t.wake_for)
        return self.appliers[(w, kind)]

    def _deliver(self, w: int, entity: str, version: int, state: State) -> None:
        """The agent of worker ``w`` applies the message; its loops serve the wake-up."""
        msg = message(entity, version, state, self.true.now())
        self.run(self._applier(w, type(msg))([Decoded(None, msg)]))  # type: ignore[arg-type]
        self.delivered.setdefault(entity, []).append((version, state))
        if self.model.deliver(entity, version, state):
            touched = (
                {entity.split(":", 1)[1]}
                if entity.startswith("source:")
                else {str(s) for s in SOURCES}
            )
            self.model.planned(self.true.now(), touched)
        self.tick((w,))

    def _send(self, w: int, entity: str, state: State, delay: bool) -> None:
        version = self._next(entity)
        if delay:
            self.delayed.append((entity, version, state))
        else:
            self._deliver(w, entity, version, state)

    # --- inputs -----------------------------------------------------------------------------

    @rule(w=W, state=SETTINGS_, delay=DELAY)
    def change_setting(self, w: int, state: SettingState, delay: bool) -> None:
        self._send(w, "setting", state, delay)
        self.after()

    @rule(w=W, source=st.sampled_from(SOURCES), state=SOURCES_, delay=DELAY)
    def change_source(self, w: int, source: Any, state: SourceState, delay: bool) -> None:
        self._send(w, f"source:{source}", state, delay)
        self.after()

    @rule(w=W, zone=st.sampled_from(ZONES))
    def change_unit(self, w: int, zone: str) -> None:
        self._send(w, "unit", UnitState(zone), False)
        self.after()

    @rule(w=W, i=st.integers(0, 9))
    def deliver_late(self, w: int, i: int) -> None:
        """A message held back arrives now (after newer Versions, maybe)."""
        if self.delayed:
            self._deliver(w, *self.delayed.pop(i % len(self.delayed)))
        self.after()

    @rule(w=W, entity=ENTITIES, i=st.integers(0, 9), revert=st.booleans())
    def replay_or_revert(self, w: int, entity: str, i: int, revert: bool) -> None:
        """A delivered message again (a replay), or its state under a new Version (a revert)."""
        seen = self.delivered.get(entity)
        if seen:
            version, state = seen[i % len(seen)]
            self._deliver(w, entity, self._next(entity) if revert else version, state)
        self.after()

    @rule(w=W)
    def claim_and_die(self, w: int) -> None:
        """A worker claims due rows and dies before it executes them."""
        worker = self.workers[w]
        runner = worker.installed("automation").core.runner

        async def claim() -> None:
            await runner.claim(await worker.runtime.pool(), worker.clock.now())

        self.run(claim())
        self.after()

    def _act_on_a_row(self, w: int, action: str, i: int, offered: bool) -> None:
        """An operator's action on a row the console offers it for (or, now and then, on any
        row: a stale page). Nothing offered: the operator does nothing."""
        rows = self.run(
            self.pool.fetch(
                "SELECT scheduler_id, scheduler_key, status_id, is_on_support_hold "
                "FROM automation.scheduler ORDER BY scheduler_key"
            )
        )
        if offered:
            rows = [r for r in rows if OFFERED[action](r["status_id"], r["is_on_support_hold"])]
        if rows:
            row = rows[i % len(rows)]
            self.request(w, action, str(row["scheduler_id"]), identity_of(row["scheduler_key"]))
        self.after()

    @rule(w=W, i=st.integers(0, 15), offered=MOSTLY)
    def cancel(self, w: int, i: int, offered: bool) -> None:
        self._act_on_a_row(w, "cancel", i, offered)

    @rule(w=W, i=st.integers(0, 15), offered=MOSTLY)
    def resend(self, w: int, i: int, offered: bool) -> None:
        self._act_on_a_row(w, "resend", i, offered)

    @rule(w=W, i=st.integers(0, 15), offered=MOSTLY, reset=st.booleans())
    def release_or_retry_key(self, w: int, i: int, offered: bool, reset: bool) -> None:
        self._act_on_a_row(w, "retry" if reset else "release", i, offered)

    # --- invariants (one per finding; see CHECKS) -------------------------------------------

    def _before_resend(self, immediate: bool) -> list[str]:
        bad = []
        for ident in {i for _, _, i, _ in self.sent if i is not None}:
            if (ident[2] == IMMEDIATE) != immediate:
                continue
            first = self.model.first_resend(ident)
            found = [s for s in self.records_of(ident) if first is None or s < first]
            if len(found) > 1:
                bad.append(f"{ident} sent {len(found)} times (steps {found})")
        return bad

    def check_f1(self) -> None:
        """Finding 1: an immediate notification is sent once (Completed is never re-sent)."""
        assert not (bad := self._before_resend(True)), f"finding 1: {bad}"

    def check_once(self) -> None:
        """A scheduled reminder is sent once (but for an operator's re-send)."""
        assert not (bad := self._before_resend(False)), bad

    def check_f2(self) -> None:
        """Finding 2: a cancelled key is not sent afterwards (unless re-sent by an operator)."""
        for step, record, ident, _ in self.sent:
            cancelled = self.model.cancelled.get(ident) if ident else None
            resent = list(self.model.resends.get(ident, {}).values()) if ident else []
            if cancelled is not None and cancelled <= step:
                assert any(cancelled < s <= step for s in resent), (
                    f"finding 2: {record.key} sent at step {step} after its cancel at step {cancelled}"
                )

    def check_f5(self) -> None:
        """Finding 5: never handed over before its due time, in database (true) time."""
        for step, record, _, due in self.sent:
            assert due is None or record.at >= due, (
                f"finding 5: {record.key} written at {record.at} (step {step}), due {due}"
            )

    def check_f6(self) -> None:
        """Finding 6: one operator's re-send request sends once, however often it is sent."""
        for ident, requests in self.model.resends.items():
            first = min(requests.values())
            after = [s for s in self.records_of(ident) if s >= first]
            assert len(after) <= len(requests), (
                f"finding 6: {ident}: {len(requests)} re-send request(s), {len(after)} sends (steps {after})"
            )

    def check_wanted(self) -> None:
        """Sent only while the current state wants the key (revalidation at execution)."""
        for step, record, ident, _ in self.sent:
            if step == self.seq:
                assert ident is not None and ident in self.model.wanted(), (
                    f"{record.key} sent at step {step}, not wanted by the state"
                )

    # --- the settle point -------------------------------------------------------------------

    def settle(self) -> None:
        """Time passes every due instant, each worker's timers run, leases expire and stale
        cleanup puts claims back; then what had to be sent is, and no row is stuck."""
        self.pass_every_due()
        held = {
            identity_of(r["scheduler_key"])
            for r in self.run(
                self.pool.fetch(
                    "SELECT scheduler_key FROM automation.scheduler "
                    "WHERE is_on_support_hold OR status_id = 'Failed'"
                )
            )
        }
        for ident in self.model.obligations() - held:
            first = self.model.first_resend(ident)
            sends = [s for s in self.records_of(ident) if first is None or s < first]
            assert sends, f"{ident} was due and wanted throughout, never sent"
        stuck = self.run(
            self.pool.fetch(
                "SELECT scheduler_key, status_id FROM automation.scheduler WHERE "
                "status_id = 'Processing' OR (status_id = 'Pending' AND NOT is_on_support_hold "
                "AND due_on < $1)",
                self.true.now() - timedelta(hours=1),
            )
        )
        assert not stuck, f"rows stuck at the settle point: {[tuple(r) for r in stuck]}"


CHECKS = {
    "f1_immediate_after_retention": frozenset({"f1"}),
    "f2_cancel_then_ensure": frozenset({"f2"}),
    "f4_pause_and_slot_retry": frozenset({"f4"}),
    "f5_fast_clock": frozenset({"f5"}),
    "f6_resend_retried": frozenset({"f6"}),
    "settles": frozenset({"once", "wanted", "settle"}),
}


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("check", sorted(CHECKS))
def test_automation(check: str, shared: Shared) -> None:
    machine = AutomationMachine.for_test(check, CHECKS[check], shared)
    run_state_machine_as_test(machine, settings=machine_settings())

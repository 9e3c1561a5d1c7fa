"""What both slices' machines share: the true clock and the workers, time passing (each
worker's timer loops run at the new instant, in a drawn order, or some workers are down), the
hand-run retention, pausing and resuming schedules, timer slots that fail or are handed back,
an operator's request sent again, and what every step wrote (outbox records, timer runs).

A slice's machine says how a record maps to an identity and its due time (``classify``),
which instants are due (``dues``), how a console action changes the model (``accepted``) and
what a settle point must find (``settle``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from streams.clock import ManualClock
from tests.integration.state_machines.world import (
    T0,
    Outbox,
    Record,
    Run,
    Shared,
    Worker,
    console,
    count_example,
    set_pause,
)

W = st.integers(0, 1)
DELTAS = st.sampled_from([1, 30, 61, 300, 3600, 6 * 3600, 86_400, 3 * 86_400, 31 * 86_400])
# Which workers' timer loops run at the new instant, in this order (a worker left out is down
# or stalled for the moment).
ORDERS = st.sampled_from([(0, 1), (1, 0), (0,), (1,), ()])
RETENTION = "table-retention"


class SliceMachine(RuleBasedStateMachine):
    # Set by each test: which checks it makes, and what its examples share.
    checks: frozenset[str] = frozenset()
    shared: Shared
    name = "machine"
    # Set by each slice.
    LISTING = ""
    WAKE: tuple[str, ...] = ()
    PAUSABLE: tuple[str, ...] = ()
    CLUSTER_ONCE: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        count_example(self.name)
        self.true = ManualClock(T0)
        self.outbox = Outbox()
        self.runs: list[Run] = []
        self.workers: list[Worker] = []
        self.seq = 0
        self.paused: set[str] = set()
        # (id, action, target, identity)
        self.requests: list[tuple[int, str, str, Any]] = []
        # (step, record, identity, due when written)
        self.sent: list[tuple[int, Record, Any, datetime | None]] = []
        # (step, run, schedules paused then)
        self.ran: list[tuple[int, Run, frozenset[str]]] = []

    def run(self, coro: Any) -> Any:
        return self.shared.loop.run(coro)

    @property
    def pool(self) -> Any:
        return self.shared.pool

    # --- what a slice says ------------------------------------------------------------------

    def classify(self, record: Record) -> tuple[Any, datetime | None]:
        raise NotImplementedError

    def dues(self) -> list[datetime]:
        raise NotImplementedError

    def accepted(self, action: str, request: int, identity: Any) -> None:
        """The console accepted (changed a row for) ``action`` of ``request``."""

    def settle(self) -> None:
        raise NotImplementedError

    # --- bookkeeping ------------------------------------------------------------------------

    def teardown(self) -> None:
        if "settle" in self.checks and self.workers:
            self._resume_everything()
            self.settle()

    def after(self) -> None:
        """What the step wrote: new outbox records and the timer runs that ended."""
        self.seq += 1
        for r in self.run(self.outbox.observe(self.pool, self.true.now())):
            ident, due = self.classify(r)
            self.sent.append((self.seq, r, ident, due))
        while self.runs:
            self.ran.append((self.seq, self.runs.pop(0), frozenset(self.paused)))

    def tick(self, order: tuple[int, ...]) -> None:
        """Each worker of ``order`` does what its loops would now: wake-ups and due slots."""
        for w in order:
            self.run(self.workers[w].run_timers(self.WAKE))

    def records_of(self, ident: Any) -> list[int]:
        return [s for s, _, i, _ in self.sent if i == ident]

    def _resume_everything(self) -> None:
        for schedule in self.PAUSABLE:
            self.run(set_pause(self.workers[0], schedule, False))
        self.paused.clear()
        for w in self.workers:
            w.faults.armed.clear()

    def pass_every_due(self) -> None:
        """Time passes every due instant, then leases expire, claims are put back and run."""
        self.true.set(max([self.true.now(), *self.dues()]) + timedelta(days=1))
        for pause in (0, 600, 60, 60):
            self.true.advance(pause)
            self.tick((0, 1))
        self.after()

    # --- time and timers --------------------------------------------------------------------

    @rule(delta=DELTAS, order=ORDERS)
    def advance(self, delta: int, order: tuple[int, ...]) -> None:
        self.true.advance(delta)
        self.tick(order)
        self.after()

    @rule(i=st.integers(0, 9), before=st.sampled_from([1, 45, 300]), order=ORDERS)
    def advance_to_just_before_due(self, i: int, before: int, order: tuple[int, ...]) -> None:
        now = self.true.now()
        dues = sorted(d for d in self.dues() if d > now)
        if dues:
            target = dues[i % len(dues)] - timedelta(seconds=before)
            if target > now:
                self.true.set(target)
        self.tick(order)
        self.after()

    @rule(w=W)
    def run_timers(self, w: int) -> None:
        self.tick((w,))
        self.after()

    @rule(w=W)
    def run_table_retention_by_hand(self, w: int) -> None:
        """``streams timers run table-retention --rerun``."""
        self.run(self.workers[w].registry.run_slot(RETENTION, rerun=True))
        self.after()

    # --- operators --------------------------------------------------------------------------

    @classmethod
    def for_test(cls, check: str, checks: frozenset[str], shared: Shared) -> type[SliceMachine]:
        """This machine making ``checks``, on ``shared``: the class a test runs."""
        name = f"{cls.name}[{check}]"
        return type(name, (cls,), {"checks": checks, "shared": shared, "name": name})

    @rule(w=W, i=st.integers(0, 5), paused=st.booleans())
    def pause_or_resume(self, w: int, i: int, paused: bool) -> None:
        schedule = self.PAUSABLE[i % len(self.PAUSABLE)]
        self.run(set_pause(self.workers[w], schedule, paused))
        (self.paused.add if paused else self.paused.discard)(schedule)
        self.after()

    @rule(i=st.integers(0, 5), fault=st.sampled_from(["fail", "handback"]))
    def next_run_fails(self, i: int, fault: str) -> None:
        """The next run of a cluster-once schedule fails (whichever worker runs it: the job's
        own fault), or is handed back (its worker is stopping)."""
        for w in self.workers:
            w.faults.armed[self.CLUSTER_ONCE[i % len(self.CLUSTER_ONCE)]] = fault
        self.after()

    def request(self, w: int, action: str, target: str, identity: Any) -> None:
        self.requests.append((len(self.requests), action, target, identity))
        self.act(w, len(self.requests) - 1)

    @rule(w=W, i=st.integers(0, 15))
    def send_a_request_again(self, w: int, i: int) -> None:
        """The operator's request again (a double click, a retried POST, the CLI re-run):
        the latest one most often (``i`` = 0), an older one now and then."""
        if self.requests:
            self.act(w, len(self.requests) - 1 - i % len(self.requests))
        self.after()

    def act(self, w: int, request: int) -> None:
        rid, action, target, ident = self.requests[request]
        done = self.run(console(self.workers[w], self.LISTING, action, target, rid))
        if done.result.outcome == "changed" and ident is not None:
            self.accepted(action, rid, ident)

    @rule(w=W)
    def pause_the_failing_job(self, w: int) -> None:
        """An operator pauses the schedule whose run just failed (or was handed back)."""
        ended = ("failed", "timeout", "cancelled")
        failed = [r.record.schedule for _, r, _ in self.ran if r.record.result in ended]
        failed = [s for s in failed if s in self.PAUSABLE]
        if failed:
            self.run(set_pause(self.workers[w], failed[-1], True))
            self.paused.add(failed[-1])
        self.after()

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def holds(self) -> None:
        """The checks this test is about (``checks``): each a ``check_<name>`` method."""
        for name in sorted(self.checks - {"settle"}):
            getattr(self, f"check_{name}")()

    def check_f4(self) -> None:
        """Finding 4: a paused schedule starts no run, whatever its path (retry, takeover, manual)."""
        for step, run, paused in self.ran:
            r = run.record
            started = r.started_at is not None
            assert not (started and r.schedule in paused), (
                f"finding 4: {r.schedule} ran ({r.kind}, {r.result}) on {run.worker} at step {step} "
                "while paused"
            )

"""The misfire planner as a pure function: properties over cadences, horizons, grace and policies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streams.timers.context import RunContext
from streams.timers.misfire import Plan, PlannedRun, plan, reclaim_floor
from streams.timers.schedule import Misfire, Mode, ResolvedSchedule
from streams.timers.slots import Cadence, min_period, next_fire, slot_at

# Two days before Europe's spring DST change (2025-03-30): zoned crons below cross it.
T0 = datetime(2025, 3, 28, 0, 0, tzinfo=UTC)
US = timedelta(microseconds=1)
MINUTE = timedelta(minutes=1)
# Spans stay well inside the planner's backlog, so every missed slot is remembered.
MAX_PERIODS = 60


class Noop:
    async def run_once(self, ctx: RunContext) -> None:
        return None


def spec(
    cadence: Cadence,
    misfire: Misfire = Misfire.SKIP,
    grace: timedelta = timedelta(seconds=30),
    window: timedelta | None = None,
) -> ResolvedSchedule:
    return ResolvedSchedule(
        name="job",
        handler=Noop(),
        cadence=cadence,
        max_duration=timedelta(seconds=1),
        mode=Mode.CLUSTER_ONCE,
        misfire=misfire,
        catch_up_window=window,
        misfire_grace=grace,
        enabled=True,
        settings_prefix=None,
    )


def all_slots(cadence: Cadence, after: datetime, until: datetime) -> list[datetime]:
    """Slots in (after, until], walked one fire at a time (the oracle)."""
    found = []
    at = next_fire(cadence, after)
    while at <= until:
        found.append(at)
        at = next_fire(cadence, at)
    return found


cadences = st.one_of(
    st.integers(min_value=1, max_value=7200).map(lambda s: Cadence(interval=timedelta(seconds=s))),
    st.integers(min_value=1, max_value=5_000_000).map(lambda us: Cadence(interval=us * US)),
    st.sampled_from(
        [
            Cadence(cron="*/15 * * * *"),
            Cadence(cron="0 * * * *", timezone="Europe/Berlin"),
            Cadence(cron="30 2 * * *", timezone="Europe/Berlin"),
            Cadence(cron="*/20 1-3 * * *", timezone="Europe/Berlin"),
        ]
    ),
)


@dataclass(frozen=True)
class Case:
    spec: ResolvedSchedule
    horizon: datetime
    now: datetime
    period: timedelta


@st.composite
def cases(
    draw: st.DrawFn, policies: tuple[Misfire, ...] = tuple(Misfire), min_periods: int = 0
) -> Case:
    cadence = draw(cadences)
    period = min_period(cadence, T0)
    horizon = T0 + draw(st.integers(min_value=0, max_value=3 * 86_400_000_000)) * US
    span = draw(
        st.integers(min_value=min_periods * (period // US), max_value=MAX_PERIODS * (period // US))
    )
    now = horizon + span * US
    grace = draw(st.integers(min_value=1, max_value=period // US)) * US
    misfire = draw(st.sampled_from(policies))
    window = None
    if misfire is Misfire.CATCH_UP:
        window = draw(st.integers(min_value=1, max_value=2 * MAX_PERIODS * (period // US))) * US
    # A backlog longer than the remembered tail is out of scope here (validated elsewhere).
    assume(len(all_slots(cadence, horizon, now)) < 900)
    return Case(spec(cadence, misfire, grace, window), horizon, now, period)


def missed_runs(p: Plan) -> list[PlannedRun]:
    return [r for r in p.runs if r.kind != "on_time"]


@settings(max_examples=300, deadline=None, database=None)
@given(cases())
def test_every_run_lies_between_the_horizon_and_now_in_order(case: Case) -> None:
    p = plan(case.spec, case.horizon, case.now)
    slots = [r.slot for r in p.runs]
    assert all(case.horizon < s <= case.now for s in slots)
    assert slots == sorted(set(slots))
    assert p.horizon == max(case.horizon, case.now)


@settings(max_examples=300, deadline=None, database=None)
@given(cases())
def test_the_on_time_slot_is_the_latest_one_iff_within_grace(case: Case) -> None:
    p = plan(case.spec, case.horizon, case.now)
    due = all_slots(case.spec.cadence, case.horizon, case.now)
    if due and case.now - due[-1] <= case.spec.misfire_grace:
        assert p.on_time == due[-1]
        assert p.runs[-1] == PlannedRun(due[-1], "on_time")
    else:
        assert p.on_time is None
        assert all(r.kind != "on_time" for r in p.runs)


@settings(max_examples=300, deadline=None, database=None)
@given(cases())
def test_missed_slots_are_the_due_ones_minus_the_on_time_one(case: Case) -> None:
    p = plan(case.spec, case.horizon, case.now)
    due = all_slots(case.spec.cadence, case.horizon, case.now)
    missed = [s for s in due if s != p.on_time]
    assert p.missed == len(due) - (1 if p.on_time else 0)
    assert list(p.missed_slots) == missed
    # Nothing was counted before, so every missed slot is fresh.
    assert p.fresh_missed == p.missed
    assert p.counted_until == (missed[-1] if missed else None)


@settings(max_examples=200, deadline=None, database=None)
@given(cases((Misfire.SKIP,)))
def test_skip_never_runs_a_missed_slot(case: Case) -> None:
    p = plan(case.spec, case.horizon, case.now)
    assert missed_runs(p) == []
    assert [r.slot for r in p.runs] == ([p.on_time] if p.on_time else [])


@settings(max_examples=200, deadline=None, database=None)
@given(cases((Misfire.COALESCE,)))
def test_coalesce_runs_at_most_the_latest_missed_slot(case: Case) -> None:
    p = plan(case.spec, case.horizon, case.now)
    expected = [PlannedRun(p.missed_slots[-1], "coalesced")] if p.missed else []
    assert missed_runs(p) == expected


@settings(max_examples=200, deadline=None, database=None)
@given(cases((Misfire.CATCH_UP,)))
def test_catch_up_runs_exactly_the_missed_slots_inside_its_window_in_order(case: Case) -> None:
    p = plan(case.spec, case.horizon, case.now)
    window = case.spec.catch_up_window
    assert window is not None
    inside = [s for s in p.missed_slots if s >= case.now - window]
    assert missed_runs(p) == [PlannedRun(s, "catch_up") for s in inside]


@settings(max_examples=200, deadline=None, database=None)
@given(cases((Misfire.CATCH_UP, Misfire.COALESCE), min_periods=2), st.data())
def test_a_slot_planned_again_after_a_failed_claim_is_counted_missed_once(
    case: Case, data: st.DataObject
) -> None:
    first = plan(case.spec, case.horizon, case.now)
    assume(first.runs)
    # The claim of the first run failed: the registry rewinds the horizon to just before it
    # and plans again after a backoff.
    failed = first.runs[0].slot
    later = case.now + data.draw(st.integers(0, 3 * (case.period // US))) * US
    again = plan(case.spec, failed - US, later, counted_until=first.counted_until)
    union = set(first.missed_slots) | set(again.missed_slots)
    assert first.fresh_missed + again.fresh_missed == len(union)


def test_nothing_is_planned_when_now_is_not_past_the_horizon() -> None:
    every_minute = spec(Cadence(interval=MINUTE))
    p = plan(every_minute, T0 + MINUTE, T0 + MINUTE)
    assert (p.runs, p.horizon, p.missed) == ((), T0 + MINUTE, 0)
    p = plan(every_minute, T0 + MINUTE, T0, counted_until=T0)
    assert (p.runs, p.horizon, p.counted_until) == ((), T0 + MINUTE, T0)


def test_the_example_of_five_missed_minutes() -> None:
    # Last run at slot 0; back at 5:45 with a 30 s grace: slots 1-5 are missed.
    now = T0 + 5.75 * MINUTE
    skip = plan(spec(Cadence(interval=MINUTE)), T0, now)
    assert (skip.runs, skip.missed) == ((), 5)
    catch_up = plan(spec(Cadence(interval=MINUTE), Misfire.CATCH_UP, window=3 * MINUTE), T0, now)
    assert catch_up.runs == tuple(PlannedRun(T0 + k * MINUTE, "catch_up") for k in (3, 4, 5))
    coalesce = plan(spec(Cadence(interval=MINUTE), Misfire.COALESCE), T0, now)
    assert coalesce.runs == (PlannedRun(T0 + 5 * MINUTE, "coalesced"),)
    on_time = plan(spec(Cadence(interval=MINUTE), Misfire.COALESCE), T0, T0 + 5.25 * MINUTE)
    assert on_time.runs == (
        PlannedRun(T0 + 4 * MINUTE, "coalesced"),
        PlannedRun(T0 + 5 * MINUTE, "on_time"),
    )


def test_the_reclaim_floor_follows_the_policy() -> None:
    now = T0 + 5.75 * MINUTE
    every_minute = Cadence(interval=MINUTE)
    assert reclaim_floor(spec(every_minute), now) == slot_at(every_minute, now)
    assert reclaim_floor(spec(every_minute, Misfire.COALESCE), now) == T0 + 5 * MINUTE
    window = 3 * MINUTE
    assert reclaim_floor(spec(every_minute, Misfire.CATCH_UP, window=window), now) == now - window


def test_the_bounds_of_grace_and_window_are_inclusive() -> None:
    every_minute = Cadence(interval=MINUTE)
    grace = timedelta(seconds=30)
    exactly = plan(spec(every_minute, grace=grace), T0, T0 + MINUTE + grace)
    assert exactly.on_time == T0 + MINUTE
    past = plan(spec(every_minute, grace=grace), T0, T0 + MINUTE + grace + US)
    assert (past.on_time, past.missed) == (None, 1)
    now = T0 + 5.75 * MINUTE
    window = now - (T0 + 3 * MINUTE)
    catch_up = plan(spec(every_minute, Misfire.CATCH_UP, window=window), T0, now)
    assert [r.slot for r in catch_up.runs] == [T0 + k * MINUTE for k in (3, 4, 5)]
    narrower = plan(spec(every_minute, Misfire.CATCH_UP, window=window - US), T0, now)
    assert [r.slot for r in narrower.runs] == [T0 + k * MINUTE for k in (4, 5)]

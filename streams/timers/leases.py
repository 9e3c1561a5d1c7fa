"""Cluster-once slot ownership: claims under a lease, fenced finishes, takeover, claim retries.

A claim holds its slot until max duration + LEASE_MARGIN. A slot whose run never finished
and whose lease ran out is taken over by one conditional UPDATE (kind ``reclaimed``); the
finish is fenced on the run id, so a stalled holder's late finish changes nothing. A claim
the store failed to answer rewinds the horizon and is planned again after a backoff, under
the schedule's misfire policy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.clock import Clock
from streams.timers.logfmt import event
from streams.timers.metrics import TimerMetrics
from streams.timers.misfire import MAX_BACKLOG, reclaim_floor
from streams.timers.ports import TimerStore
from streams.timers.retries import SlotEnd, slot_end
from streams.timers.schedule import ResolvedSchedule
from streams.timers.state import ScheduleState

# A claim is held for the schedule's max duration plus this margin (time from claim to
# start, cancellation unwinding, clock skew between workers).
LEASE_MARGIN = timedelta(seconds=10)
# Backoff between retries of a slot whose claim failed (store unavailable): first, at most.
CLAIM_RETRY_FIRST = timedelta(seconds=1)
CLAIM_RETRY_MAX = timedelta(seconds=30)
# How often a cluster-once schedule looks for slots another worker released (a failure's
# retry, a hand-back on a graceful stop) or abandoned, between its own fire times.
RELEASED_POLL = timedelta(seconds=30)


def claim_backoff(failures: int, first: timedelta = CLAIM_RETRY_FIRST) -> timedelta:
    """The wait after the ``failures``-th consecutive failed claim: doubling, capped."""
    # The exponent is bounded too: a long outage must not overflow timedelta.
    return min(first * (1 << min(max(failures - 1, 0), 32)), CLAIM_RETRY_MAX)


@dataclass(frozen=True)
class ClaimResult:
    won: bool
    # Set when the store failed: the slot is planned again after a backoff.
    error: str | None = None


class SlotLeases:
    """Claims, finishes and takeovers of one worker's cluster-once slots on the store."""

    def __init__(
        self,
        store: TimerStore,
        *,
        clock: Clock,
        metrics: TimerMetrics,
        worker_id: str,
        lease_margin: timedelta = LEASE_MARGIN,
        claim_retry: timedelta = CLAIM_RETRY_FIRST,
        released_poll: timedelta = RELEASED_POLL,
    ) -> None:
        self._poll = released_poll
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._worker_id = worker_id
        self._margin = lease_margin
        self._retry = claim_retry

    def lease(self, spec: ResolvedSchedule) -> datetime:
        """Until when a claim made now holds its slot: the run is cancelled at its max
        duration, so a live holder finishes (and releases the slot) before that."""
        return self._clock.now() + spec.max_duration + self._margin

    async def claim(self, state: ScheduleState, slot: datetime, run_id: str) -> ClaimResult:
        """Insert-wins claim of ``slot`` for run ``run_id``."""
        name = state.spec.name
        try:
            won = await self._store.claim_slot(
                name, slot, self._worker_id, run_id, self.lease(state.spec)
            )
        except Exception as exc:
            self._claim_failed(state, slot)
            event(
                logging.ERROR,
                "timer_claim_failed",
                schedule=name,
                run_id=run_id,
                slot=slot,
                error=type(exc).__name__,
                retry_at=state.retry_at,
            )
            return ClaimResult(False, f"slot claim failed: {type(exc).__name__}")
        state.claim_failures = 0
        state.retry_at = None
        if not won:
            state.stats.deduped += 1
            self._metrics.dedupes.labels(schedule=name).inc()
            event(logging.DEBUG, "timer_slot_deduped", schedule=name, slot=slot)
        return ClaimResult(won)

    def _claim_failed(self, state: ScheduleState, slot: datetime) -> None:
        """Plan ``slot`` (and what follows it) again after a backoff; the misfire policy
        decides then whether it still runs."""
        state.claim_failures += 1
        state.stats.claim_retries += 1
        self._metrics.claim_retries.labels(schedule=state.spec.name).inc()
        state.retry_at = self._clock.now() + claim_backoff(state.claim_failures, self._retry)
        if state.horizon is None or state.horizon >= slot:
            state.horizon = slot - timedelta(microseconds=1)

    async def advance(self, name: str, slot: datetime, run_id: str) -> None:
        """Remember ``slot`` as started, so a restart sees the slots it missed."""
        try:
            await self._store.advance_state(name, slot, self._worker_id)
        except Exception as exc:
            event(
                logging.WARNING,
                "timer_state_advance_failed",
                schedule=name,
                run_id=run_id,
                error=type(exc).__name__,
            )

    async def finish(
        self,
        state: ScheduleState,
        slot: datetime,
        run_id: str,
        result: str,
        duration: float,
        *,
        error: str | None = None,
        stopping: bool = False,
        handed_back: bool = False,
    ) -> SlotEnd | None:
        """Record the end of run ``run_id``, unless its slot was taken over meanwhile: final
        (ok, or the attempt bound reached), or released for another attempt after the
        backoff, or handed back at once on a graceful stop (``error``: the error class)."""
        name = state.spec.name
        try:
            if result == "ok":
                end: SlotEnd | None = SlotEnd(True, True, 0)
                owned = await self._store.finish_slot(name, slot, run_id, result, duration)
            else:
                attempts = await self._store.slot_attempts(name, slot, run_id)
                end = None
                if attempts is not None:
                    end = slot_end(
                        result,
                        attempts,
                        state.spec.retry,
                        self._clock.now(),
                        stopping=stopping,
                        handed_back=handed_back,
                    )
                    owned = await self._end(state, slot, run_id, result, duration, end, error)
                else:
                    owned = False
        except Exception as exc:
            event(
                logging.WARNING,
                "timer_finish_failed",
                schedule=name,
                run_id=run_id,
                error=type(exc).__name__,
            )
            return None
        if not owned:
            # Our lease ran out (paused or too slow) and another worker took the slot over:
            # its record stands, ours is not written.
            state.stats.lease_lost += 1
            self._metrics.lease_lost.labels(schedule=name).inc()
            event(
                logging.WARNING,
                "reminders_timer_lease_lost",
                schedule=name,
                run_id=run_id,
                slot=slot,
                result=result,
            )
            return None
        return end

    async def _end(
        self,
        state: ScheduleState,
        slot: datetime,
        run_id: str,
        result: str,
        duration: float,
        end: SlotEnd,
        error: str | None,
    ) -> bool:
        name = state.spec.name
        if end.final:
            owned = await self._store.finish_slot(name, slot, run_id, result, duration, error)
            if owned and end.given_up:
                state.stats.given_up += 1
                self._metrics.given_up.labels(schedule=name).inc()
                event(
                    logging.ERROR,
                    "timer_slot_given_up",
                    schedule=name,
                    slot=slot,
                    run_id=run_id,
                    result=result,
                    attempts=end.attempts,
                    error=error,
                )
            return owned
        assert end.next_attempt_at is not None
        owned = await self._store.release_slot(
            name,
            slot,
            run_id,
            result,
            duration,
            end.next_attempt_at,
            counted=end.counted,
            error=error,
        )
        if not owned:
            return False
        if end.counted:
            state.stats.retries += 1
            self._metrics.retries.labels(schedule=name).inc()
        else:
            state.stats.handed_back += 1
            self._metrics.handbacks.labels(schedule=name).inc()
        # Look for the released slot again when its next attempt is due.
        if state.lease_check_at is None or end.next_attempt_at < state.lease_check_at:
            state.lease_check_at = end.next_attempt_at
        event(
            logging.WARNING,
            "timer_slot_handed_back" if end.handed_back else "timer_slot_released",
            schedule=name,
            slot=slot,
            run_id=run_id,
            result=result,
            attempts=end.attempts,
            next_attempt_at=end.next_attempt_at,
            error=error,
        )
        return True

    async def retake(self, state: ScheduleState, slot: datetime, run_id: str) -> bool:
        """Claim ``slot`` if it is released (waiting for its next attempt), before its backoff:
        an operator's manual run of a slot that failed. False when it is held or finished."""
        now = self._clock.now()
        try:
            return await self._store.reclaim_slot(
                state.spec.name,
                slot,
                self._worker_id,
                run_id,
                self.lease(state.spec),
                now,
                released=True,
            )
        except Exception as exc:
            event(
                logging.WARNING,
                "timer_reclaim_failed",
                schedule=state.spec.name,
                slot=slot,
                error=type(exc).__name__,
            )
            return False

    async def unfinished(self, state: ScheduleState) -> list[tuple[datetime, datetime]]:
        """(slot, lease) of the schedule's unfinished slots still worth running, oldest first:
        a dead claimant's, and released ones (their lease is their next attempt). The retry
        window is the misfire policy's (reclaim_floor): a released slot older than it is
        finished with its last result and counted as given up."""
        spec = state.spec
        now = self._clock.now()
        # Look again after the poll (sooner when a lease runs out or a retry is due).
        state.lease_check_at = now + self._poll
        floor = reclaim_floor(spec, now)
        try:
            for slot in await self._store.give_up_released(spec.name, floor):
                # Released, and its retry window passed before an attempt succeeded.
                state.stats.given_up += 1
                self._metrics.given_up.labels(schedule=spec.name).inc()
                event(logging.ERROR, "timer_slot_given_up", schedule=spec.name, slot=slot)
            return await self._store.unfinished_slots(spec.name, floor, MAX_BACKLOG)
        except Exception as exc:
            event(
                logging.WARNING,
                "timer_lease_check_failed",
                schedule=spec.name,
                error=type(exc).__name__,
            )
            state.lease_check_at = now + self._retry
            return []

    def held(self, state: ScheduleState, lease: datetime) -> bool:
        """True while ``lease`` still holds its slot (a live, or not yet presumed dead,
        claimant): look again when it runs out."""
        if lease <= self._clock.now():
            return False
        if state.lease_check_at is None or lease < state.lease_check_at:
            state.lease_check_at = lease
        return True

    async def take_over(
        self, state: ScheduleState, slot: datetime, lease: datetime, run_id: str
    ) -> bool:
        """Take ``slot``, whose lease ran out, over for run ``run_id``: False when another
        worker was first, or the store failed (look again after the retry delay)."""
        name = state.spec.name
        now = self._clock.now()
        try:
            won = await self._store.reclaim_slot(
                name, slot, self._worker_id, run_id, self.lease(state.spec), now
            )
        except Exception as exc:
            event(
                logging.WARNING,
                "timer_reclaim_failed",
                schedule=name,
                slot=slot,
                error=type(exc).__name__,
            )
            state.lease_check_at = now + self._retry
            return False
        if not won:
            return False
        state.stats.reclaimed += 1
        self._metrics.takeovers.labels(schedule=name).inc()
        event(
            logging.WARNING,
            "timer_slot_reclaimed",
            schedule=name,
            slot=slot,
            run_id=run_id,
            lease_expired_at=lease,
        )
        return True

"""The pure retry rules of cluster-once slots: which ends release, the backoff, the bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streams.timers import Mode, RegistrationError, Schedule
from streams.timers.context import RunContext
from streams.timers.retries import MAX_BACKOFF, RetryPolicy, retry_backoff, slot_end
from streams.timers.schedule import resolve

NOW = datetime(2026, 12, 2, 0, 30, tzinfo=UTC)
POLICY = RetryPolicy(attempts=3, backoff=timedelta(seconds=60))


class Handler:
    async def run_once(self, ctx: RunContext) -> None:
        return None


def test_backoff_doubles_per_attempt_and_is_capped() -> None:
    assert [retry_backoff(POLICY, n).total_seconds() for n in (1, 2, 3, 4)] == [60, 120, 240, 480]
    assert retry_backoff(POLICY, 400) == MAX_BACKOFF


def test_ok_is_final_and_counted() -> None:
    end = slot_end("ok", 1, POLICY, NOW)
    assert (end.final, end.counted, end.attempts, end.given_up) == (True, True, 2, False)


@pytest.mark.parametrize("result", ["failed", "timeout", "cancelled"])
def test_a_failed_timed_out_or_cancelled_run_releases_after_the_backoff(result: str) -> None:
    first = slot_end(result, 0, POLICY, NOW)
    assert (first.final, first.counted, first.attempts) == (False, True, 1)
    assert first.next_attempt_at == NOW + timedelta(seconds=60)
    second = slot_end(result, 1, POLICY, NOW)
    assert (second.final, second.attempts) == (False, 2)
    assert second.next_attempt_at == NOW + timedelta(seconds=120)


def test_the_last_attempt_is_final_and_given_up() -> None:
    end = slot_end("failed", 2, POLICY, NOW)
    assert (end.final, end.counted, end.attempts, end.given_up) == (True, True, 3, True)
    assert end.next_attempt_at is None
    # One attempt in all: the first failure is final (the old behaviour, on purpose).
    once = slot_end("timeout", 0, RetryPolicy(attempts=1), NOW)
    assert (once.final, once.given_up) == (True, True)


@pytest.mark.parametrize("result", ["failed", "timeout", "cancelled"])
def test_a_run_ending_badly_while_stopping_is_handed_back_uncounted(result: str) -> None:
    # Even at the bound: a shutdown is not the handler's failure.
    end = slot_end(result, 2, POLICY, NOW, stopping=True)
    assert (end.final, end.counted, end.attempts, end.handed_back) == (False, False, 2, True)
    assert end.next_attempt_at == NOW


def test_a_handler_that_hands_back_is_released_at_once() -> None:
    end = slot_end("cancelled", 0, POLICY, NOW, handed_back=True)
    assert end.handed_back and end.next_attempt_at == NOW
    # A run that completed while the worker stops is simply finished.
    assert slot_end("ok", 0, POLICY, NOW, stopping=True).final


def _schedule(**kw: object) -> Schedule:
    base: dict[str, object] = {
        "name": "job",
        "handler": Handler(),
        "cron": "30 0 * * *",
        "max_duration": timedelta(minutes=10),
        "mode": Mode.CLUSTER_ONCE,
        "settings_prefix": "TIMER_JOB_",
    }
    base.update(kw)
    return Schedule(**base)  # type: ignore[arg-type]


def test_retry_settings_default_and_env_overrides() -> None:
    spec = resolve(_schedule(), environ={}, handlers={}, now=NOW)
    assert spec.retry == RetryPolicy(3, timedelta(seconds=60))
    env = {"TIMER_JOB_RETRY_ATTEMPTS": "5", "TIMER_JOB_RETRY_BACKOFF_SECONDS": "2.5"}
    spec = resolve(_schedule(), environ=env, handlers={}, now=NOW)
    assert spec.retry == RetryPolicy(5, timedelta(seconds=2.5))


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"TIMER_JOB_RETRY_ATTEMPTS": "0"}, "TIMER_JOB_RETRY_ATTEMPTS"),
        ({"TIMER_JOB_RETRY_ATTEMPTS": "21"}, "TIMER_JOB_RETRY_ATTEMPTS"),
        ({"TIMER_JOB_RETRY_ATTEMPTS": "two"}, "TIMER_JOB_RETRY_ATTEMPTS"),
        ({"TIMER_JOB_RETRY_BACKOFF_SECONDS": "-1"}, "TIMER_JOB_RETRY_BACKOFF_SECONDS"),
        ({"TIMER_JOB_RETRY_BACKOFF_SECONDS": "86400"}, "TIMER_JOB_RETRY_BACKOFF_SECONDS"),
    ],
)
def test_bad_retry_settings_are_refused_by_name(env: dict[str, str], setting: str) -> None:
    with pytest.raises(RegistrationError) as err:
        resolve(_schedule(), environ=env, handlers={}, now=NOW)
    assert err.value.setting == setting

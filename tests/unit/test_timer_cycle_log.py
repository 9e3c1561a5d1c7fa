"""streams/timers/cycle_log.py: both cycle lines for every run, at one level, INFO when the run
says something and once a summary interval while a schedule is idle (an injected clock)."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from streams import logs
from streams.clock import ManualClock
from streams.timers.cycle_log import SUMMARY_SECONDS, CycleLog

AS_OF = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
IDLE = {"sent": 0, "skipped": 0}


@pytest.fixture
def out() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logs.formatter("json"))
    logger = logging.getLogger(f"test.cycles.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield logger, buffer
    logger.removeHandler(handler)


def taken(buffer: io.StringIO) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    buffer.truncate(0)
    buffer.seek(0)
    return lines


def run(cycles: CycleLog, clock: ManualClock, n: int, *, sent: int = 0) -> None:
    cycle = cycles.start(f"run-{n}", as_of=AS_OF)
    clock.advance(0.25)
    cycle.completed({**IDLE, "sent": sent}, worked=bool(sent))


def levels(lines: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(line["action"], line["level"]) for line in lines]


def test_every_run_writes_both_lines_with_zero_counts_and_idle_runs_are_debug(out) -> None:  # type: ignore[no-untyped-def]
    logger, buffer = out
    clock = ManualClock(AS_OF)
    cycles = CycleLog(logger, clock)
    run(cycles, clock, 1)  # the first run of the process: INFO
    first = taken(buffer)
    assert levels(first) == [("cycle_started", "info"), ("cycle_completed", "info")]
    started, completed = first
    assert started["run_id"] == "run-1" and started["as_of"] == "2026-03-01T09:00:00Z"
    assert completed == {
        **completed, "run_id": "run-1", "sent": 0, "skipped": 0, "outcome": "ok",
        "duration_ms": 250.0, "idle_runs": 0,
    }  # fmt: skip
    for n in range(2, 6):  # idle, one a second: both lines at DEBUG
        clock.advance(0.75)
        run(cycles, clock, n)
    idle = taken(buffer)
    assert levels(idle) == [("cycle_started", "debug"), ("cycle_completed", "debug")] * 4
    assert all(line["sent"] == 0 for line in idle if line["action"] == "cycle_completed")


def test_an_idle_schedule_gets_one_info_pair_per_summary_interval_counting_the_idle_runs(
    out,
) -> None:  # type: ignore[no-untyped-def]
    logger, buffer = out
    clock = ManualClock(AS_OF)
    cycles = CycleLog(logger, clock)
    run(cycles, clock, 0)
    clock.advance(0.75)
    taken(buffer)
    infos: list[dict[str, object]] = []
    for n in range(1, 181):  # three minutes of a 1-second schedule, idle
        run(cycles, clock, n)
        clock.advance(0.75)
        infos += [line for line in taken(buffer) if line["level"] == "info"]
    summaries = [line for line in infos if line["action"] == "cycle_completed"]
    assert len(infos) == 2 * len(summaries) and len(summaries) == 3
    assert [s["idle_runs"] for s in summaries] == [int(SUMMARY_SECONDS) - 1] * 3


def test_work_is_always_at_info_and_so_is_the_run_after_it(out) -> None:  # type: ignore[no-untyped-def]
    logger, buffer = out
    clock = ManualClock(AS_OF)
    cycles = CycleLog(logger, clock)
    run(cycles, clock, 1)
    run(cycles, clock, 2)
    taken(buffer)
    run(cycles, clock, 3, sent=4)  # started at DEBUG (idle before), then found work
    started, completed = taken(buffer)
    assert (started["level"], completed["level"]) == ("debug", "info")
    assert completed["sent"] == 4 and completed["started_at_level"] == "debug"
    assert completed["as_of"] == "2026-03-01T09:00:00Z" and completed["idle_runs"] == 1
    run(cycles, clock, 4)  # the run after work: INFO, even though idle
    assert levels(taken(buffer)) == [("cycle_started", "info"), ("cycle_completed", "info")]
    run(cycles, clock, 5)
    assert levels(taken(buffer)) == [("cycle_started", "debug"), ("cycle_completed", "debug")]


def test_a_failed_run_completes_with_its_error_class_at_info(out) -> None:  # type: ignore[no-untyped-def]
    logger, buffer = out
    clock = ManualClock(AS_OF)
    cycles = CycleLog(logger, clock)
    run(cycles, clock, 1)
    run(cycles, clock, 2)
    taken(buffer)
    cycle = cycles.start("run-3", as_of=AS_OF)
    cycle.failed(ConnectionError("db at 10.0.0.1 said no"), IDLE)
    cycle.completed(IDLE, worked=False)  # a second end writes nothing
    _, completed = taken(buffer)
    assert completed["level"] == "info" and completed["outcome"] == "failed"
    assert completed["error"] == "ConnectionError" and completed["sent"] == 0
    assert "10.0.0.1" not in json.dumps(completed)
    run(cycles, clock, 4)  # after a failure: INFO
    assert levels(taken(buffer))[0] == ("cycle_started", "info")

"""The recovery bench's timeline of a fault from the workers' log lines (bench/recovery_steps.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.recovery_steps import Fault, LogLine, steps_after

TOPIC = "p.pin.calendar.events.v1"


def line(at: float, text: str = "", **fields: Any) -> LogLine:
    return LogLine(at, "w0", "x", text or str(fields.get("action", "")), fields)


def first(at: float, partition: int, generation: int) -> LogLine:
    return line(
        at,
        action="partition_first_record",
        topic=TOPIC,
        partition=partition,
        generation=generation,
    )


def test_the_steps_run_to_the_first_generation_that_consumes_every_partition() -> None:
    lines = [
        first(99.0, 0, 4),  # before the kill: not this fault's
        line(108.0, "Revoking previously assigned partitions {...} for group g"),
        first(108.2, 1, 5),  # a generation that never got all four partitions
        line(110.0, "Joined group 'g' (generation 6) with member_id m"),
        line(110.1, "Successfully synced group g with generation 6"),
        line(111.0, "[^---Recovery]: Worker ready"),
        *(first(111.2 + p / 10, p, 6) for p in range(4)),
        first(112.0, 0, 7),  # a later generation: ignored
    ]
    s = steps_after(lines, Fault("kill", "w1", 100.0), TOPIC, 4)
    assert s.generation == 6
    assert (s.noticed, s.joined, s.synced, s.ready) == pytest.approx((8.0, 10.0, 10.1, 11.0))
    assert s.resumed == pytest.approx(11.5)
    assert sorted(s.consumed) == [0, 1, 2, 3]


def test_no_generation_with_every_partition_leaves_the_fault_unresumed() -> None:
    lines = [line(101.0, "Revoking previously assigned partitions"), first(102.0, 0, 5)]
    s = steps_after(lines, Fault("kill", "w1", 100.0), TOPIC, 4)
    assert s.resumed is None and s.generation is None and s.noticed == pytest.approx(1.0)

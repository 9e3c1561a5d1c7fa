"""The summary table's verdicts against the performance issue's targets (bench/targets.py),
and the wait for a quiet database before each bench (bench/quiet.py) and its heading phrase."""

from __future__ import annotations

import pytest

from bench.quiet import QuietWait, wait_until_idle
from bench.report import measure, quiet_summary
from bench.targets import AUTOMATION, DISPATCH, EXPIRY, INGEST, ISSUE, LATENESS_P99, targets


def verdict(name: str, unit: str, project: float, reference: float | None, higher: bool) -> bool:
    m = measure(name, unit, project, reference, targets=targets(name), higher_is_better=higher)
    assert m.passed is not None
    return m.passed


@pytest.mark.parametrize(
    ("project", "reference", "passed"),
    [
        (39.0, 30.0, True),  # 1.3x, 39 s: at the bound
        (40.0, 30.0, False),  # 1.33x
        (44.9, 40.0, True),
        (45.0, 40.0, False),  # 1.13x but not under 45 s
        (47.1, 23.9, False),  # d62f241's durable run: 1.97x
    ],
)
def test_expiry_needs_both_the_ratio_and_the_45_seconds(
    project: float, reference: float, passed: bool
) -> None:
    assert verdict(EXPIRY, "s", project, reference, higher=False) is passed


@pytest.mark.parametrize(
    ("name", "project", "reference", "passed"),
    [
        (AUTOMATION, 7_500, 10_000, True),
        (AUTOMATION, 7_499, 10_000, False),
        (DISPATCH, 8_000, 10_000, True),
        (DISPATCH, 20_425, 27_079, False),  # d62f241: 0.75x
        (INGEST, 8_000, 10_000, True),
        (INGEST, 7_900, 10_000, False),  # under 0.8x
        (INGEST, 4_900, 5_000, False),  # 0.98x but under 5,000 events/s
        (INGEST, 10_933, 12_208, True),  # d62f241: 0.90x
    ],
)
def test_rates_against_the_issue(name: str, project: float, reference: float, passed: bool) -> None:
    assert verdict(name, "rows/s", project, reference, higher=True) is passed


def test_lateness_p99_is_bounded_at_100_ms() -> None:
    assert verdict(LATENESS_P99, "ms", 100.0, None, higher=False) is True
    assert verdict(LATENESS_P99, "ms", 117.0, None, higher=False) is False


def test_the_table_shows_the_issue_targets() -> None:
    texts = {
        name: measure(name, "s" if name == EXPIRY else "", 1.0, 1.0, targets=targets(name)).target
        for name in ISSUE
    }
    assert texts[EXPIRY] == "≤ 1.3x and < 45 s"
    assert texts[AUTOMATION] == "≥ 0.75x"
    assert texts[INGEST] == "≥ 0.8x and ≥ 5,000"
    assert texts[DISPATCH] == "≥ 0.8x"
    assert texts[LATENESS_P99] == "≤ 100"
    with pytest.raises(KeyError):
        targets("claim time: large vs small table")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def pause(self, seconds: float) -> None:
        self.now += seconds


async def test_the_wait_ends_when_nothing_is_vacuumed_any_more() -> None:
    clock, answers = Clock(), [["bench_a (1)"], ["bench_a (1)"], []]

    async def busy() -> list[str]:
        return answers.pop(0)

    waited, still = await wait_until_idle(busy, 10.0, 0.5, clock, clock.pause)
    assert (waited, still) == (1.0, ())
    assert answers == []


async def test_the_wait_gives_up_at_its_deadline_and_says_what_was_busy() -> None:
    clock, polls = Clock(), []

    async def busy() -> list[str]:
        polls.append(clock.now)
        return ["bench_b (2)"]

    waited, still = await wait_until_idle(busy, 2.0, 0.5, clock, clock.pause)
    assert waited == 2.0 and still == ("bench_b (2)",)
    assert polls == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_the_heading_phrase_counts_the_waits_and_names_the_longest_and_the_late() -> None:
    waits = [
        QuietWait("dispatch", 0.2, 0.0, False).to_json(),
        QuietWait("lateness", 3.0, 1.5, False).to_json(),
        QuietWait("expiry", 0.5, 120.0, True, ("bench_x (1)",)).to_json(),
    ]
    assert quiet_summary(waits) == (
        "quiet database before each bench (3 waits, 125.2 s in all, longest 120.5 s before "
        "expiry; deadline passed before expiry)"
    )
    assert quiet_summary([]) == "no quiet-database wait"
    assert (
        "deadline passed, still vacuuming bench_x (1)"
        in QuietWait("expiry", 0.5, 120.0, True, ("bench_x (1)",)).text()
    )

"""When the relay reads its backlog gauges: at most every interval, and never more than a
small share of its time however long a read takes (a large backlog makes the count slow)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streams.clock import ManualClock
from streams.metrics import Metrics
from streams.outbox import OutboxRelay
from streams.outbox.config import RelayConfig
from streams.outbox.gauges import GAUGE_SHARE, GaugeSchedule


def test_a_quick_read_is_due_again_after_the_interval() -> None:
    gauges = GaugeSchedule(interval=1.0)
    assert gauges.due(0.0)
    gauges.read(0.0, 0.01)
    assert not gauges.due(1.0)
    assert gauges.due(1.01)


def test_a_slow_read_waits_in_proportion_to_its_cost() -> None:
    gauges = GaugeSchedule(interval=1.0, share=0.05)
    gauges.read(10.0, 12.0)  # two seconds
    assert gauges.next_due == pytest.approx(12.0 + 2.0 * 19)
    assert not gauges.due(49.9)
    assert gauges.due(50.0)


@pytest.mark.parametrize("share", [0.0, 1.0, -0.1, 1.5])
def test_the_share_is_a_fraction(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        GaugeSchedule(interval=1.0, share=share)


async def test_the_relay_spends_at_most_its_share_on_slow_gauges() -> None:
    # The relay's loop reads the gauges after each pass. A read that takes 0.5 s (the backlog
    # count over 250,000 events did) and one pass a second: the old schedule (due an
    # interval after the read began) read again after every pass, a third of the time.
    clock = ManualClock(datetime(2026, 12, 6, tzinfo=UTC))
    relay = OutboxRelay(
        dsn="postgresql://unused",
        metrics=Metrics().outbox,
        producer_factory=lambda: None,  # type: ignore[arg-type,return-value]
        config=RelayConfig(metrics_interval=1.0),
        clock=clock,
    )
    reading = 0.0

    async def slow_refresh() -> None:
        nonlocal reading
        clock.advance(0.5)
        reading += 0.5

    relay.refresh_metrics = slow_refresh  # type: ignore[method-assign,assignment]
    start = clock.monotonic()
    for _ in range(600):
        clock.advance(1.0)  # a pass
        await relay._refresh_metrics_if_due()
    elapsed = clock.monotonic() - start
    assert reading > 0
    assert reading <= GAUGE_SHARE * elapsed + 0.5

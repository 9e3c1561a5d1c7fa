"""The calendar card's lateness line (SentAt - DueAt per minute of DueAt, from the ledger):
merged into the outbox activity minute by minute, and drawn beside the outbox wait."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from db.event_reminders import LatenessMinute
from streams.console.activity import buckets, summary
from streams.slices.calendar.lateness import merge
from streams.web.page import render_html

UNTIL = datetime(2026, 12, 3, 16, 30, 20, tzinfo=UTC)
NOW_MINUTE = UNTIL.replace(second=0)


def late(minutes_ago: int, sent: int, p95: float) -> LatenessMinute:
    return LatenessMinute(NOW_MINUTE - timedelta(minutes=minutes_ago), sent, p95, p95 * 2)


def test_each_minute_gets_the_lateness_of_what_came_due_in_it() -> None:
    activity = summary(buckets([], UNTIL), capped=False)
    out = merge(activity, [late(59, 10, 0.25), late(0, 3, 7.5)], limit=100)
    assert len(out["minutes"]) == 60
    assert out["minutes"][0]["lateness_p95_seconds"] == 0.25
    assert out["minutes"][-1]["lateness_p95_seconds"] == 7.5
    assert out["minutes"][30]["lateness_p95_seconds"] is None  # nothing came due then
    assert out["worst_lateness_p95_seconds"] == 7.5
    assert out["lateness_capped"] is False
    assert merge(activity, [late(1, 100, 1.0)], limit=100)["lateness_capped"] is True


def test_an_unreadable_ledger_leaves_the_activity_as_it_was() -> None:
    activity = summary(buckets([], UNTIL), capped=False)
    assert merge(activity, None) is activity
    assert merge({"error": "database unavailable"}, [late(0, 1, 1.0)]) == {
        "error": "database unavailable"
    }


def test_the_card_draws_lateness_beside_the_outbox_wait() -> None:
    activity = merge(summary(buckets([], UNTIL), capped=False), [late(5, 4, 3.0)], limit=100)
    page = render_html({"calendar": {"due_backlog": 0, "activity": activity}}, True, {})
    card = re.search(r'<section class="slice" id="calendar">.*?</section>', page, re.S)
    assert card
    assert "p95 lateness (due -&gt; sent)" in card.group(0)
    assert 'data-k="calendar.activity.worst_lateness_p95_seconds" title="3">3 s<' in card.group(0)
    # Without a lateness line (other slices) the chart is the outbox wait alone.
    plain = render_html({"automation": {"activity": summary(buckets([], UNTIL), False)}}, True, {})
    assert "p95 lateness" not in plain

"""The status page: escaped values tagged with their JSON path, blank empties, humanized
durations, the worst problem on top, one card with charts per slice."""

from __future__ import annotations

import re
from typing import Any

from streams.web.page import render_html
from streams.web.problems import (
    DEAD_LETTERS,
    FAILED_RUN,
    HELD,
    NOT_READY,
    PARKED,
    STALLED,
    problems,
)

EVIL = '<script>alert("x")</script>'
OK_CHECKS = {"postgres": "ok", "kafka": "ok", "crashed_agents": [], "stalled_partitions": {}}


def _minutes(n: int = 60) -> list[dict[str, Any]]:
    return [
        {"minute": f"m{i}", "written": i, "published": i, "backlog": 0, "wait_p95_seconds": None}
        for i in range(n)
    ]


def test_every_printed_value_is_escaped_and_tagged_with_its_json_path() -> None:
    data = {
        "app": EVIL,
        "worker": {"id": EVIL},
        "agents": [{"agent": EVIL, "processed": 7, "partitions": [{"partition": EVIL, "lag": 2}]}],
        "tables": [{"table": EVIL, "keys": 3}],
        "timers": [{"name": EVIL, "counts": {"runs": 4}, "last_summary": {EVIL: EVIL}}],
        "outbox": {"backlog": 5},
        EVIL: {"rows": [{EVIL: EVIL}], "n": 1.5},
    }
    page = render_html(data, True, {EVIL: EVIL})
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert 'data-k="agents.0.processed">7<' in page
    assert 'data-k="agents.0.partitions.0.lag">2<' in page
    assert 'data-k="timers.0.counts.runs">4<' in page
    assert 'data-k="outbox.backlog">5<' in page
    assert 'data-k="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;.n">1.5<' in page


def test_empty_values_print_blank_never_as_brackets() -> None:
    data = {
        "app": "a",
        "agents": [{"agent": "x", "dlq": {"total": 0, "by_reason": {}}, "topics": []}],
        "timers": [{"name": "t", "last_summary": {"errors": [], "ok": {}}, "last_error": None}],
        "outbox": {"backlog": 0, "parked_by_reason": {}},
        "profile": {"thresholds": [], "last_run": None, "owners_here": {}},
    }
    checks = {**OK_CHECKS, "local_storage": {}}
    page = render_html(data, True, checks)
    visible = re.sub(r"<(style|title)>.*?</\1>|<[^>]+>", " ", page, flags=re.S)
    assert "[]" not in visible and "{}" not in visible and "None" not in visible
    assert 'data-k="health.crashed_agents"></td>' in page
    assert "last summary" not in page  # nothing but empties: no summary line


def test_durations_are_humanized_with_the_exact_figure_in_the_title() -> None:
    data = {
        "timers": [{"name": "t", "interval_seconds": 86400, "last_duration_seconds": 0.25}],
        "outbox": {"oldest_unpublished_age_seconds": 75.0},
    }
    page = render_html(data, True, OK_CHECKS)
    assert 'data-k="timers.0.interval_seconds" title="86400">1 d<' in page
    assert 'data-k="timers.0.last_duration_seconds" title="0.25">250 ms<' in page
    assert 'data-k="outbox.oldest_unpublished_age_seconds" title="75">1 min 15 s<' in page


def _ranked(data: dict[str, Any], ready: bool = True, checks: Any = None) -> list[int]:
    return [p.rank for p in problems(data, ready, checks or OK_CHECKS)]


def test_problems_are_ranked_worst_first() -> None:
    data = {
        "agents": [
            {
                "agent": "calendar-events",
                "errors": 2,
                "stalled": [{"partition": "t:1", "lag": 9, "seconds": 130}],
            }
        ],
        "timers": [{"name": "document-expiry", "last_result": "failed", "last_error": "boom"}],
        "outbox": {"parked": 3},
        "automation": {"on_hold": 1, "hold_view": "/automation/hold"},
    }
    found = problems(data, False, {**OK_CHECKS, "kafka": "not started"})
    assert [p.rank for p in found] == [STALLED, NOT_READY, PARKED, HELD, FAILED_RUN, DEAD_LETTERS]
    assert found[0].title == "partition t:1 stalled"
    assert "2 min 10 s" in found[0].detail
    assert found[1].detail == "kafka"
    assert found[3].href == "/automation/hold"
    assert _ranked({"outbox": {"parked": 0}, "automation": {"on_hold": 0}}) == []


def test_the_banner_shows_the_worst_problem_and_counts_the_others_or_all_clear() -> None:
    data = {"outbox": {"parked": 2}, "timers": [{"name": "x", "last_result": "timed_out"}]}
    page = render_html(data, True, OK_CHECKS)
    banner = re.search(r'<div class="banner problem" id="banner" data-problems="2">.*?</div>', page)
    assert banner, page
    assert "2 outbox rows parked" in banner.group(0)
    assert "and 1 more" in banner.group(0)
    assert banner.group(0).index("parked") < banner.group(0).index("timed_out")
    clear = render_html({"outbox": {"parked": 0}}, True, OK_CHECKS)
    assert 'class="banner clear"' in clear and "All clear" in clear


def test_a_slice_card_shows_its_counts_and_its_last_hour_as_charts() -> None:
    minutes = _minutes()
    minutes[-1]["wait_p95_seconds"] = 2.5
    data = {
        "calendar": {
            "due_backlog": 3,
            "oldest_due_age_seconds": 12.0,
            "activity": {
                "window_minutes": 60,
                "published": 1770,
                "backlog": 0,
                "worst_wait_p95_seconds": 2.5,
                "capped": False,
                "minutes": minutes,
            },
        }
    }
    page = render_html(data, True, OK_CHECKS)
    card = re.search(r'<section class="slice" id="calendar">.*?</section>', page, re.S)
    assert card
    assert 'data-k="calendar.due_backlog">3<' in card.group(0)
    assert card.group(0).count("<svg") == 2
    assert card.group(0).count("<rect") == 59  # a bar per minute with something published
    assert 'data-k="calendar.activity.published">1770<' in card.group(0)
    assert 'data-k="calendar.activity.worst_wait_p95_seconds" title="2.5">2.5 s<' in card.group(0)
    assert "<td" not in card.group(0).split("<svg")[1].split("</svg>")[0]


def test_with_a_console_session_each_schedule_offers_pause_or_resume() -> None:
    data = {
        "timers": [
            {"name": "calendar-dispatch", "paused": False, "last_result": "ok"},
            {"name": "document-expiry", "paused": True, "last_result": "ok"},
        ]
    }
    page = render_html(data, True, OK_CHECKS, csrf="tok-1")
    assert page.count('action="/console/actions/timers/pause"') == 1
    assert page.count('action="/console/actions/timers/resume"') == 1
    assert 'name="schedule" value="document-expiry"' in page
    assert page.count('name="csrf" value="tok-1"') == 2
    assert 'data-k="timers.1.paused">yes<' in page
    assert 'http-equiv="refresh"' not in page  # no reload under a reason being typed
    # Without a session (no WEB_ADMIN_TOKEN, or not logged in): no forms, and it refreshes.
    plain = render_html(data, True, OK_CHECKS)
    assert "/console/actions/timers" not in plain
    assert 'http-equiv="refresh" content="5"' in plain

"""The row pages' HTML from their data: every value escaped, ids linking to their detail, the
filter form keeping the query, the next-page link only when there is a next page, capped
counts shown as such."""

from __future__ import annotations

from streams.console import rows
from streams.console.rows_html import render_detail, render_index, render_page

HOSTILE = '<script>alert("x")</script>'


def test_a_page_escapes_values_links_ids_and_keeps_the_query() -> None:
    listing = rows.find("automation/scheduler")
    data = {
        "query": {"state": "Failed", "limit": "1", "key_prefix": HOSTILE},
        "order": ["scheduled_on", "scheduler_id"],
        "rows": [{"scheduler_id": 7, "scheduler_key": HOSTILE, "status_id": "Failed"}],
        "ids": ["7"],
        "next": "abc",
        "next_href": "/console/rows/automation/scheduler?state=Failed&after=abc",
    }
    page = render_page(listing, data)
    assert HOSTILE not in page
    assert "&lt;script&gt;" in page
    assert '<a href="/console/rows/automation/scheduler/7">7</a>' in page
    assert "<option selected>Failed</option>" in page
    assert (
        '<a id="next" href="/console/rows/automation/scheduler?state=Failed&amp;after=abc">' in page
    )
    last = render_page(listing, {**data, "next": None, "next_href": None})
    assert 'id="next"' not in last and "last page" in last


def test_the_index_shows_capped_counts_and_a_detail_its_outbox() -> None:
    index = render_index(
        {
            "count_cap": 10_000,
            "listings": [
                {
                    "name": "calendar/reminders",
                    "title": "Calendar reminders",
                    "table": "calendar.event_reminders",
                    "about": "",
                    "states": {"Pending": 10_000, "Sent": 3},
                    "href": "/console/rows/calendar/reminders",
                }
            ],
        }
    )
    assert 'data-k="listings.0.states.Pending">10000+</td>' in index
    assert 'data-k="listings.0.states.Sent">3</td>' in index
    detail = render_detail(
        rows.find("calendar/reminders"),
        {
            "id": "r1",
            "row": {"status": "Sent", "skip_reason": HOSTILE},
            "attempts": 0,
            "last_error": None,
            "outbox": [{"outbox_id": 4, "topic": "t", "delivery": "parked", "parked": "TooLarge"}],
            "lineage": None,
        },
    )
    assert HOSTILE not in detail
    assert 'data-k="outbox.0.delivery">parked</td>' in detail

"""The status page escapes everything it prints and tags each value with its JSON path."""

from __future__ import annotations

from streams.web.page import render_html

EVIL = '<script>alert("x")</script>'


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

"""The overview's last hour per slice: per-minute buckets with a running backlog, the summary,
the 30 s process cache (it saves reads, it decides nothing), and the SVG charts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from db.outbox import MinuteStats
from streams.console import activity
from streams.console.activity import ActivityReader, buckets, summary
from streams.console.chart import Series, scale_max, svg

UNTIL = datetime(2026, 12, 3, 16, 30, 20, tzinfo=UTC)
NOW_MINUTE = UNTIL.replace(second=0)


def stat(minutes_ago: int, written: int, published: int, p95: float | None = None) -> MinuteStats:
    minute = NOW_MINUTE - timedelta(minutes=minutes_ago)
    return MinuteStats("t", minute, written, published, p95, p95)


def test_every_minute_of_the_hour_is_present_oldest_first_with_a_running_backlog() -> None:
    out = buckets([stat(59, 10, 4, 0.5), stat(58, 0, 6, 1.0), stat(0, 3, 0)], UNTIL)
    assert len(out) == 60
    assert out[0]["minute"] == (NOW_MINUTE - timedelta(minutes=59)).isoformat()
    assert out[-1]["minute"] == NOW_MINUTE.isoformat()
    assert [m["backlog"] for m in out[:3]] == [6, 0, 0]
    assert out[-1]["backlog"] == 3
    assert out[0]["wait_p95_seconds"] == 0.5 and out[2]["wait_p95_seconds"] is None


def test_rows_older_than_the_window_count_in_its_first_minute_and_backlog_never_negative() -> None:
    out = buckets([stat(90, 5, 0), stat(30, 0, 9)], UNTIL)
    assert out[0]["written"] == 5
    assert out[29]["backlog"] == 0  # published more than the window saw written


def test_summary_totals_the_window() -> None:
    s = summary(buckets([stat(10, 4, 4, 0.2), stat(5, 6, 2, 3.0)], UNTIL), capped=False)
    assert s["published"] == 6 and s["backlog"] == 4
    assert s["worst_wait_p95_seconds"] == 3.0 and s["window_minutes"] == 60
    assert summary([], capped=True)["backlog"] == 0


class FakeRuntime:
    class settings:
        topic_prefix = "x."

    class clock:
        @staticmethod
        def now() -> datetime:
            return UNTIL


async def test_the_reader_reads_once_per_ttl_for_every_topic(monkeypatch: Any) -> None:
    reads: list[list[str]] = []

    async def fake_read(self: ActivityReader) -> dict[str, dict[str, Any]]:
        reads.append(sorted(self.topics))
        return {t: {"published": len(reads)} for t in self.topics}

    monkeypatch.setattr(ActivityReader, "_read", fake_read)
    now = [100.0]
    runtime: Any = FakeRuntime()
    calendar = activity.activity_of(runtime, "a.v1")
    automation = activity.activity_of(runtime, "b.v1")
    reader = activity._READERS[runtime]
    reader.monotonic = lambda: now[0]
    assert (await calendar())["published"] == 1
    assert (await automation())["published"] == 1
    now[0] += 29
    assert (await calendar())["published"] == 1
    now[0] += 2
    assert (await automation())["published"] == 2
    assert reads == [["x.a.v1", "x.b.v1"]] * 2


def test_the_chart_draws_bars_and_lines_and_escapes_its_labels() -> None:
    values: list[float | None] = [0, 2, None, 4]
    out = svg(
        "<t>", [Series("<b>", values, "bar"), Series("l", [1, None, 2, 3], "line")], data_k="a.b"
    )
    assert out.startswith('<svg class="chart"') and 'data-k="a.b"' in out
    assert out.count("<rect") == 2  # zero and missing draw nothing
    assert out.count("<polyline") == 1 and out.count("<circle") == 1  # broken at the gap
    assert "<t>" not in out and "&lt;t&gt;" in out and "&lt;b&gt;" in out
    assert ">4<" in out  # the y axis's top
    assert ">1 min 30 s<" in svg("w", [Series("w", [90.0], "line")], seconds=True)
    assert scale_max([]) == 1.0 and scale_max([None, 0.5]) == 1.0
    assert ">100 ms<" in svg("w", [Series("w", [0.02], "line")], seconds=True)

"""The operators' view against a running worker with traffic: every metric an alert rule or a
dashboard panel uses is exported, and /status opened in headless Chromium shows the numbers
of /status?format=json (screenshot saved in the test's output folder)."""

from __future__ import annotations

import asyncio
import html
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from devkit.kafka import produce
from devkit.messages.factories import calendar_event, encode
from devkit.observe.metrics import sample
from devkit.observe.promql import SHARED, dashboard_uses, exported_names, metric_names, rule_uses
from devkit.seed import seed_reminders
from devkit.tools import tool
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings
from streams.slices import names as slice_names

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
DUE, INPUTS, BAD = 12, 6, 1  # seeded due reminders; valid and invalid input messages


async def _sent(db: str) -> int:
    conn = await asyncpg.connect(db)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
            )
        )
    finally:
        await conn.close()


async def _traffic(db: str, kafka: str, prefix: str, worker: WorkerProcess) -> None:
    """Due reminders the worker sends, input messages it applies and one it dead-letters;
    returns once they are all handled and the outbox is empty."""
    start = datetime.now(UTC) - timedelta(minutes=5)
    assert await seed_reminders(db, events=DUE, offsets=[1], start=start) == DUE
    later = datetime.now(UTC) + timedelta(days=1)
    messages: list[tuple[str | None, bytes | None]] = []
    for _ in range(INPUTS):
        msg = calendar_event(StartAt=later, OccurredAt=datetime.now(UTC))
        messages.append((msg["EventId"], encode(msg)))
    messages.append(("not-a-uuid", b"{not json"))
    await produce(kafka, prefix + EVENTS, messages)
    await worker.wait_ready()

    def handled() -> tuple[float, float]:
        _, text = worker.get("/metrics")
        total = sum(
            sample(str(text), "reminders_stream_messages_total", topic=EVENTS, result=r) or 0
            for r in ("applied", "noop", "dlq")
        )
        backlog = sample(str(text), "reminders_outbox_backlog") or 0
        return total, backlog

    await eventually(lambda: _sent(db), until=lambda n: n == DUE, timeout=90, what="sent")
    await eventually(
        lambda: asyncio.to_thread(handled),
        until=lambda v: v[0] == INPUTS + BAD and v[1] == 0,
        timeout=90,
        what="inputs handled and outbox published",
    )


@pytest.fixture(scope="module")
def worker(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[WorkerProcess]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = worker_env(module_database_url, kafka_bootstrap, module_topic_prefix)
    w = WorkerProcess(env, module_tmp, "ops-worker").start()
    try:
        asyncio.run(_traffic(module_database_url, kafka_bootstrap, module_topic_prefix, w))
        yield w
    finally:
        w.stop()


@pytest.mark.timeout(300)
def test_every_metric_a_rule_or_panel_uses_is_exported_by_a_running_worker(
    worker: WorkerProcess,
) -> None:
    status, text = worker.get("/metrics")
    assert status == 200
    exported = exported_names(str(text))
    uses = [
        u for u in rule_uses() + dashboard_uses() if u.slice == SHARED or u.slice in slice_names()
    ]
    assert {u.slice for u in uses} >= {"calendar", "automation", SHARED}
    missing = sorted(
        f"{u.where}: {name}" for u in uses for name in metric_names(u.expr) if name not in exported
    )
    assert not missing, "used but not exported:\n" + "\n".join(missing)
    # The liveness series the alerts read exist once a run succeeded (not only declared).
    assert sample(
        str(text), "reminders_timer_last_success_timestamp_seconds", schedule="calendar-dispatch"
    )


def chromium(*args: str) -> str:
    out = subprocess.run(
        [tool("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", "--disable-dev-shm-usage", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def shown(dom: str) -> dict[str, str]:
    """Every ``data-k`` cell of the rendered page: JSON path -> the text it shows."""
    cells = re.findall(r'<td[^>]*data-k="([^"]+)"[^>]*>(.*?)</td>', dom, re.S)
    return {html.unescape(k): html.unescape(re.sub(r"<[^>]+>", "", v)) for k, v in cells}


def lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def as_text(value: Any) -> str:
    from streams.web.page import _text

    return _text(value)


# Values that change between the two JSON reads around the page load: rates, ages, the next
# fire time, and the cluster list (it fills in as workers' heartbeats land).
VOLATILE = re.compile(r"rate_per_second|age_seconds|next_fire_at|running|^health\.|^cluster\.")


@pytest.mark.timeout(300)
def test_status_page_in_headless_chromium_shows_the_numbers_of_the_json(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{worker.port}/status"
    _, before = worker.get("/status?format=json")
    dom = chromium("--dump-dom", url)
    _, after = worker.get("/status?format=json")
    cells = shown(dom)
    assert "outbox.backlog" in cells and "agents.0.processed" in cells, sorted(cells)[:20]
    compared = []
    for path, text in cells.items():
        if VOLATILE.search(path):
            continue
        values = {as_text(lookup(before, path)), as_text(lookup(after, path))}
        assert text in values, f"{path}: page shows {text!r}, JSON has {values}"
        compared.append(path)
    # The numbers the issue names are among those compared.
    agent = next(i for i, a in enumerate(before["agents"]) if a["processed"])
    for path in (
        f"agents.{agent}.processed",
        f"agents.{agent}.errors",
        f"agents.{agent}.lag",
        f"agents.{agent}.partitions.0.lag",
        "tables.0.keys",
        "tables.0.hit_ratio",
        "tables.0.recovery",
        "timers.0.counts.runs",
        "timers.0.counts.missed",
        "timers.0.last_result",
        "outbox.backlog",
        "outbox.published",
        "automation.on_hold",
    ):
        assert path in compared, path
    assert cells[f"agents.{agent}.processed"] == str(INPUTS + BAD)
    assert cells[f"agents.{agent}.errors"] == str(BAD)
    assert float(cells["outbox.published"]) >= DUE
    shot = tmp_path / "status-page.png"
    chromium("--window-size=1600,1500", f"--screenshot={shot}", url)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")

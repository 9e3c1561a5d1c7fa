"""The operators' view against a running worker with traffic: every metric an alert rule or a
dashboard panel uses is exported, and /status opened in headless Chromium (selenium) shows the
numbers of /status?format=json, the worst problem on top and a card with charts per slice
(screenshot saved in the test's output folder)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from devkit.browser import full_page_screenshot
from devkit.kafka import produce
from devkit.messages.factories import calendar_event, encode
from devkit.observe.metrics import sample
from devkit.observe.promql import SHARED, dashboard_uses, exported_names, metric_names, rule_uses
from devkit.seed import seed_reminders
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.console.layout import text
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


def shown(driver: WebDriver) -> dict[str, tuple[str, str | None]]:
    """Every ``data-k`` cell of the rendered page: JSON path -> (its text, its title)."""
    cells = driver.execute_script(
        "return Array.from(document.querySelectorAll('td[data-k]'))"
        ".map(e => [e.dataset.k, e.textContent, e.getAttribute('title')]);"
    )
    return {k: (text, title) for k, text, title in cells}


def lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


# Values that change between the two JSON reads around the page load: rates, ages, the next
# fire time, and the cluster list (it fills in as workers' heartbeats land).
VOLATILE = re.compile(
    r"rate_per_second|age_seconds|next_fire_at|running|^health\.|^cluster\.|\.activity\."
)


@pytest.mark.timeout(300)
def test_status_page_in_headless_chromium_shows_the_numbers_of_the_json(
    worker: WorkerProcess, browser: WebDriver, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{worker.port}/status"
    _, before = worker.get("/status?format=json")
    browser.get(url)
    _, after = worker.get("/status?format=json")
    cells = shown(browser)
    assert "outbox.backlog" in cells and "agents.0.processed" in cells, sorted(cells)[:20]
    compared = []
    for path, (shows, title) in cells.items():
        if VOLATILE.search(path):
            continue
        values = {text(lookup(before, path)), text(lookup(after, path))}
        # A duration prints humanized, its exact figure in the cell's title.
        exact = title if title is not None else shows
        assert exact in values, f"{path}: page shows {shows!r} ({title!r}), JSON has {values}"
        assert "[]" not in shows and "{}" not in shows, f"{path}: {shows!r}"
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
    assert cells[f"agents.{agent}.processed"][0] == str(INPUTS + BAD)
    assert cells[f"agents.{agent}.errors"][0] == str(BAD)
    assert float(cells["outbox.published"][0]) >= DUE
    # The worst problem on top: the dead-lettered input, linking to the DLQ browser.
    banner = browser.find_element(By.ID, "banner")
    assert banner.get_attribute("data-problems") == "1", banner.text
    assert "1 input messages dead-lettered" in banner.text
    assert banner.find_element(By.TAG_NAME, "a").get_attribute("href").endswith("/console/dlq")
    # A card per slice, each with its two charts; calendar's bars are the reminders it sent.
    for name in ("calendar", "automation", "document_expiry"):
        card = browser.find_element(By.ID, name)
        assert len(card.find_elements(By.CSS_SELECTOR, "svg.chart")) == 2, name
    assert before["calendar"]["activity"]["published"] == DUE
    bars = browser.find_elements(By.CSS_SELECTOR, "#calendar svg.chart rect")
    assert bars, "no bar for the minute the reminders were sent"
    main = browser.find_element(By.TAG_NAME, "main").text
    assert "[]" not in main and "{}" not in main
    shot = full_page_screenshot(browser, tmp_path / "status-page.png", width=1600)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")

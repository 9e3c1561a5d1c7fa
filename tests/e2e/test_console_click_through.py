"""An operator retries a poison reminder in the browser on a running worker with
WEB_ADMIN_TOKEN set: /console/rows → the calendar reminders listing → filtered to Retrying
with the filter form → the row's detail → log in with the token → Retry with a reason. The
row (read from PostgreSQL, not through the console) is no longer backing off and the audit
names the actor and the reason. The same POST without a session or CSRF token is refused;
with no token configured the actions are off. A schedule is paused and resumed over the web
(bearer token): /timers and /metrics follow, the audit names the actor."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from devkit.harness import console as seed
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

TOKEN = "click-through-token-0123456789abcdef0123456789"


async def _seed(url: str) -> seed.Seeded:
    conn = await asyncpg.connect(url)
    try:
        # Due in a month: the worker's dispatcher leaves them alone.
        return await seed.calendar_rows(
            conn, per_state=2, base=datetime.now(UTC) + timedelta(days=30)
        )
    finally:
        await conn.close()


async def _fetch(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def seeded_and_settings(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str
) -> seed.Seeded:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    return asyncio.run(_seed(module_database_url))


def _worker(
    url: str, bootstrap: str, prefix: str, tmp: Path, name: str, **extra: str
) -> Iterator[WorkerProcess]:
    worker = WorkerProcess(worker_env(url, bootstrap, prefix, **extra), tmp, name).start()
    try:
        asyncio.run(worker.wait_ready())
        yield worker
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def worker(
    seeded_and_settings: seed.Seeded,
    module_database_url: str,
    kafka_bootstrap: str,
    module_topic_prefix: str,
    module_tmp: Path,
) -> Iterator[WorkerProcess]:
    yield from _worker(
        module_database_url,
        kafka_bootstrap,
        module_topic_prefix,
        module_tmp,
        "console-click",
        WEB_ADMIN_TOKEN=TOKEN,
    )


def _post(port: int, path: str, fields: dict[str, str], **headers: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=urllib.parse.urlencode(fields).encode(),
        headers={"Accept": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_retry_a_poison_row_through_the_browser(
    worker: WorkerProcess,
    seeded_and_settings: seed.Seeded,
    browser: WebDriver,
    module_database_url: str,
) -> None:
    base = f"http://127.0.0.1:{worker.port}"
    poison = str(seeded_and_settings.reminders["Retrying"][0])
    wait = WebDriverWait(browser, 15)

    browser.get(base + "/console/rows")
    browser.find_element(By.CSS_SELECTOR, 'a[href^="/console/rows/calendar/reminders"]').click()
    form = wait.until(
        lambda d: d.find_element(By.CSS_SELECTOR, 'form[action="/console/rows/calendar/reminders"]')
    )
    Select(form.find_element(By.NAME, "state")).select_by_visible_text("Retrying")
    form.find_element(By.CSS_SELECTOR, 'button[type="submit"]').click()
    wait.until(lambda d: "state=Retrying" in d.current_url)
    browser.find_element(
        By.CSS_SELECTOR, f'a[href="/console/rows/calendar/reminders/{poison}"]'
    ).click()
    wait.until(lambda d: d.current_url.endswith(poison))
    detail_url = browser.current_url
    assert "log in" in browser.page_source  # actions offered once logged in

    browser.get(base + "/console/login")
    browser.find_element(By.NAME, "token").send_keys(TOKEN)
    browser.find_element(By.NAME, "actor").send_keys("ops-alice")
    browser.find_element(By.CSS_SELECTOR, 'button[type="submit"]').click()
    wait.until(lambda d: d.current_url.endswith("/console/rows"))

    browser.get(detail_url)
    retry = browser.find_element(By.CSS_SELECTOR, 'form[action="/console/actions/retry"]')
    retry.find_element(By.NAME, "reason").send_keys("provider fixed, INC-42")
    retry.find_element(By.CSS_SELECTOR, 'button[data-action="retry"]').click()
    wait.until(lambda d: "/console/actions/retry" in d.current_url)
    badge = browser.find_element(By.CSS_SELECTOR, ".badge")
    assert "ok" in (badge.get_attribute("class") or "").split()
    assert "Pending, 3 failed attempts -> Pending" in badge.text

    [row] = asyncio.run(
        _fetch(
            module_database_url,
            "SELECT status, attempts, next_attempt_at = '-infinity' AS now_due "
            "FROM calendar.event_reminders WHERE reminder_id = $1::uuid",
            poison,
        )
    )
    assert (row["status"], row["attempts"], row["now_due"]) == ("Pending", 0, True)
    audit = asyncio.run(
        _fetch(
            module_database_url,
            "SELECT actor, action, reason, outcome FROM ops.console_audit WHERE target = $1",
            poison,
        )
    )
    assert [tuple(a) for a in audit] == [
        ("ops-alice", "retry", "provider fixed, INC-42", "changed")
    ]

    # Still logged in, the overview's schedules table pauses a schedule on every worker.
    for verb, paused in (("pause", True), ("resume", False)):
        browser.get(base + "/status")
        form = browser.find_element(
            By.XPATH,
            f'//form[@action="/console/actions/timers/{verb}"]'
            '[input[@name="schedule"][@value="outbox-retention"]]',
        )
        form.find_element(By.NAME, "reason").send_keys("INC-43")
        form.find_element(By.CSS_SELECTOR, f'button[data-action="{verb}"]').click()
        wait.until(lambda d, v=verb: f"/console/actions/timers/{v}" in d.current_url)
        assert "on every worker" in browser.find_element(By.CSS_SELECTOR, ".badge").text
        timers = {t["name"]: t for t in worker.get("/timers")[1]}
        assert timers["outbox-retention"]["paused"] is paused


def _session(port: int) -> str:
    """The cookie the login form sets (the 303 is not followed)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/console/login",
        data=urllib.parse.urlencode({"token": TOKEN, "actor": "ops-bob"}).encode(),
        method="POST",
    )
    try:
        urllib.request.build_opener(NoRedirect).open(request, timeout=5)
    except urllib.error.HTTPError as exc:
        assert exc.code == 303
        cookie = exc.headers["Set-Cookie"].split(";", 1)[0]
        assert cookie.startswith("console_session=")
        return cookie
    raise AssertionError("the login form did not redirect")


def test_the_same_post_without_session_or_csrf_is_refused(
    worker: WorkerProcess, seeded_and_settings: seed.Seeded, module_database_url: str
) -> None:
    other = str(seeded_and_settings.reminders["Retrying"][1])
    fields = {"listing": "calendar/reminders", "target": other, "reason": "no session"}
    assert _post(worker.port, "/console/actions/retry", fields)[0] == 401
    cookie = _session(worker.port)
    status, body = _post(worker.port, "/console/actions/retry", fields, Cookie=cookie)
    assert (status, "CSRF" in body["message"]) == (403, True)
    forged = {**fields, "csrf": "forged"}
    assert _post(worker.port, "/console/actions/retry", forged, Cookie=cookie)[0] == 403
    [row] = asyncio.run(
        _fetch(
            module_database_url,
            "SELECT attempts FROM calendar.event_reminders WHERE reminder_id = $1::uuid",
            other,
        )
    )
    assert row["attempts"] == 3


def test_actions_are_off_without_a_token(
    seeded_and_settings: seed.Seeded,
    module_database_url: str,
    kafka_bootstrap: str,
    module_topic_prefix: str,
    module_tmp: Path,
) -> None:
    other = str(seeded_and_settings.reminders["Retrying"][1])
    for plain in _worker(
        module_database_url, kafka_bootstrap, module_topic_prefix, module_tmp, "console-off"
    ):
        fields = {"listing": "calendar/reminders", "target": other, "reason": "off"}
        status, _ = _post(
            plain.port, "/console/actions/retry", fields, Authorization=f"Bearer {TOKEN}"
        )
        assert status == 403
        status, page = plain.get("/console/login")
        assert status == 200 and "Console actions are off" in page


def _paused_gauge(worker: WorkerProcess, schedule: str) -> str:
    status, text = worker.get("/metrics")
    assert status == 200
    line = f'reminders_timer_paused{{schedule="{schedule}"}} '
    [value] = [x[len(line) :] for x in text.splitlines() if x.startswith(line)]
    return value


def test_pause_and_resume_a_schedule_over_the_web(
    worker: WorkerProcess, module_database_url: str
) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}", "X-Operator": "ops-carol"}
    fields = {"schedule": "document-expiry", "reason": "provider outage"}
    status, body = _post(worker.port, "/console/actions/timers/pause", fields, **bearer)
    assert (status, body["outcome"]) == (200, "changed")
    timers = {t["name"]: t for t in worker.get("/timers")[1]}
    assert timers["document-expiry"]["paused"] is True
    assert float(_paused_gauge(worker, "document-expiry")) == 1
    assert _post(worker.port, "/console/actions/timers/pause", fields)[0] == 401

    status, body = _post(worker.port, "/console/actions/timers/resume", fields, **bearer)
    assert (status, body["outcome"]) == (200, "changed")
    timers = {t["name"]: t for t in worker.get("/timers")[1]}
    assert timers["document-expiry"]["paused"] is False
    assert float(_paused_gauge(worker, "document-expiry")) == 0
    unknown = {**fields, "schedule": "nothing"}
    assert _post(worker.port, "/console/actions/timers/pause", unknown, **bearer)[0] == 404
    audit = asyncio.run(
        _fetch(
            module_database_url,
            "SELECT actor, action, outcome FROM ops.console_audit "
            "WHERE target = 'document-expiry' ORDER BY id",
        )
    )
    assert [a["actor"] for a in audit] == ["ops-carol", "ops-carol"]
    assert [a["outcome"] for a in audit] == ["changed", "changed"]

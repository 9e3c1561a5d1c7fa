"""The console's row pages on a running worker, as an operator clicks through them: the listings
with their counts, a listing filtered (state, tenant), its next-page link followed, a row's
detail reached from the list's link, in HTML and in JSON; bad values are 400 naming the
parameter, an unknown listing or row 404."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from devkit.harness import console as seed
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e


async def _seed(url: str) -> seed.Seeded:
    conn = await asyncpg.connect(url)
    try:
        # Due in a month: the worker's dispatcher leaves them Pending.
        s = await seed.calendar_rows(conn, per_state=6, base=datetime.now(UTC) + timedelta(days=30))
        sent = s.reminders["Sent"][0]
        await seed.outbox(conn, str(s.events[sent]), {"ReminderId": str(sent)}, published=True)
        return s
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def worker_and_rows(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[tuple[WorkerProcess, seed.Seeded]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    seeded = asyncio.run(_seed(module_database_url))
    env = worker_env(module_database_url, kafka_bootstrap, module_topic_prefix)
    worker = WorkerProcess(env, module_tmp, "console-rows").start()
    try:
        asyncio.run(worker.wait_ready())
        yield worker, seeded
    finally:
        worker.stop()


def get(worker: WorkerProcess, path: str) -> tuple[int, Any]:
    return worker.get(path)


def test_list_filter_next_page_and_detail_in_html_and_json(
    worker_and_rows: tuple[WorkerProcess, seed.Seeded],
) -> None:
    worker, s = worker_and_rows
    status, index = get(worker, "/console/rows?format=json")
    assert status == 200
    counts = {x["name"]: x["states"] for x in index["listings"]}
    assert counts["calendar/reminders"] == {"Pending": 8, "Retrying": 2, "Sent": 6, "Skipped": 6}
    status, page = get(worker, "/console/rows")
    assert status == 200 and 'href="/console/rows/calendar/reminders?state=Sent"' in page

    tenant_a_sent = [str(r) for r in s.reminders["Sent"] if r in s.tenant_a]
    path = (
        f"/console/rows/calendar/reminders?state=Sent&tenant={seed.TENANT_A}"
        f"&owner={seed.OWNER_A}&limit=2"
    )
    status, first = get(worker, path + "&format=json")
    assert status == 200
    assert first["ids"] == tenant_a_sent[:2]
    status, rest = get(worker, first["next_href"] + "&format=json")
    assert (status, rest["ids"], rest["next"]) == (200, tenant_a_sent[2:], None)

    status, listing_html = get(worker, path)
    assert status == 200
    assert '<form class="inline" method="get" action="/console/rows/calendar/reminders">' in (
        listing_html
    )
    assert f'value="{seed.TENANT_A}"' in listing_html
    following = re.search(r'<a id="next" href="([^"]+)"', listing_html)
    assert following is not None
    status, second_html = get(worker, html.unescape(following.group(1)))
    assert status == 200 and tenant_a_sent[2] in second_html and 'id="next"' not in second_html

    link = f'href="/console/rows/calendar/reminders/{tenant_a_sent[0]}"'
    assert link in listing_html
    status, detail_html = get(worker, f"/console/rows/calendar/reminders/{tenant_a_sent[0]}")
    assert status == 200
    assert "outbox records" in detail_html and "published" in detail_html
    status, detail = get(worker, f"/console/rows/calendar/reminders/{tenant_a_sent[0]}?format=json")
    assert status == 200
    assert detail["row"]["status"] == "Sent"
    assert detail["lineage"]["kind"] == "calendar reminder"
    assert [r["delivery"] for r in detail["outbox"]] == ["published"]


def test_bad_values_are_400_and_unknown_rows_404(
    worker_and_rows: tuple[WorkerProcess, seed.Seeded],
) -> None:
    worker, _ = worker_and_rows
    status, body = get(worker, "/console/rows/calendar/reminders?from=soon&format=json")
    assert (status, body["parameter"]) == (400, "from")
    assert body["error"].startswith("from: ")
    status, page = get(worker, "/console/rows/automation/scheduler?state=Lost")
    assert status == 400 and "state: " in page
    status, body = get(worker, "/console/rows/calendar/nothing?format=json")
    assert status == 404 and "no listing" in body["error"]
    missing = "/console/rows/calendar/reminders/00000000-0000-4000-8000-000000000000"
    assert get(worker, missing + "?format=json")[0] == 404
    assert get(worker, "/console/rows/automation/scheduler/abc?format=json")[0] == 400

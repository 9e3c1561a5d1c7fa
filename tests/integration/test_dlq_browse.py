"""DLQ browse and selective replay on real Kafka: the newest records with their reasons,
bounded to a window back from the end offsets, never a value; one record (partition +
offset) or one reason replayed through the replay path, saving no progress, so a plain
replay afterwards still sends everything."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from devkit.kafka import create_topics
from streams.app import create_worker
from streams.dlq import browser
from streams.dlq.browse import browse
from streams.dlq.replay import replay_dlq
from streams.dlq.rules import SKIP_NOT_SELECTED, ReplayUsageError
from streams.settings import Settings
from tests.integration.test_dlq_replay import (
    EVENTS,
    Topics,
    count,
    dlq_headers,
    produce_dlq,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def topics(kafka_bootstrap: str, topic_prefix: str) -> Topics:
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, app_id=f"{topic_prefix}app"
    )
    t = Topics(settings)
    await create_topics(kafka_bootstrap, [t.source, t.dlq])
    return t


SECRET = b'{"EventId": "secret-value-123"}'


async def _fill(t: Topics) -> None:
    src = t.source
    records = [(b"k%d" % i, SECRET, dlq_headers(src, 0, i)) for i in range(6)]
    records += [
        (b"s%d" % i, SECRET, dlq_headers(src, 1, 100 + i, "EventId: field required"))
        for i in range(3)
    ]
    await produce_dlq(t.settings.kafka_bootstrap, t.dlq, records)


async def test_browse_is_bounded_newest_first_and_never_shows_values(topics: Topics) -> None:
    await _fill(topics)
    found = await browse(topics.settings, EVENTS, limit=4)
    assert found.records == 9 and found.read == 9
    assert dict(found.by_reason) == {"value is not valid JSON": 6, "EventId: field required": 3}
    assert len(found.entries) == 4
    assert all(e.replay == "yes" for e in found.entries)
    assert "secret-value-123" not in json.dumps(found.view())
    only = await browse(topics.settings, EVENTS, reason="EventId: field required")
    assert {e.reason for e in only.entries} == {"EventId: field required"}
    assert len(only.entries) == 3
    # The window is what bounds the read: a window of 1 reads one record per partition.
    small = await browse(topics.settings, EVENTS, window=1)
    assert small.records == 9 and small.read <= 4
    with pytest.raises(ReplayUsageError):
        await browse(topics.settings, "no.such.topic.v1")


async def test_one_record_then_one_reason_then_everything(topics: Topics) -> None:
    await _fill(topics)
    bootstrap = topics.settings.kafka_bootstrap
    newest = (await browse(topics.settings, EVENTS, limit=1)).entries[0]
    one = await replay_dlq(topics.settings, EVENTS, record=(newest.partition, newest.offset))
    assert one.replayed == 1 and one.read == 1
    assert await count(bootstrap, topics.source) == 1
    some = await replay_dlq(topics.settings, EVENTS, reason="EventId: field required")
    assert some.replayed == 3 and some.skipped[SKIP_NOT_SELECTED] == 6
    assert await count(bootstrap, topics.source) == 4
    # No progress was saved: a plain replay sends all nine.
    everything = await replay_dlq(topics.settings, EVENTS)
    assert everything.replayed == 9
    with pytest.raises(ReplayUsageError, match="no record at partition"):
        await replay_dlq(topics.settings, EVENTS, record=(newest.partition, 10_000))


async def test_the_console_page_and_its_replay_post(
    topics: Topics, database_url: str, pool: asyncpg.Pool
) -> None:
    await _fill(topics)
    token = "d" * 40
    s = topics.settings
    ctx = create_worker(
        Settings(
            database_url=database_url,
            kafka_bootstrap=s.kafka_bootstrap,
            topic_prefix=s.topic_prefix,
            app_id=s.app_id,
            web_admin_token=token,
            worker_timer_process=False,
        )
    )
    client = TestClient(TestServer(ctx.app.web.web_app))
    await client.start_server()
    try:
        r = await client.get(f"/console/dlq?topic={EVENTS}&format=json&limit=2")
        data = await r.json()
        assert r.status == 200 and data["records"] == 9 and len(data["entries"]) == 2
        assert "secret-value-123" not in json.dumps(data)
        page = await (await client.get(f"/console/dlq?topic={EVENTS}")).text()
        assert "value is not valid JSON" in page and "<form" not in page  # no session: no forms
        newest = data["entries"][0]
        form = {"topic": EVENTS, "partition": newest["partition"], "offset": newest["offset"]}
        assert (await client.post("/console/dlq/replay", data=form)).status == 401
        r = await client.post(
            "/console/dlq/replay",
            data=form,
            headers={"Authorization": f"Bearer {token}", "X-Operator": "hana"},
        )
        assert r.status == 200, await r.text()
        assert (await r.json())["replayed"] == 1
        assert await count(s.kafka_bootstrap, topics.source) == 1
        audit = await pool.fetchrow("SELECT actor, action, listing, target FROM ops.console_audit")
        assert tuple(audit) == (
            "hana",
            "dlq-replay",
            "dlq",
            f"{topics.dlq}:{newest['partition']}:{newest['offset']}",
        )
    finally:
        await client.close()
        await ctx.runtime.close()


async def test_the_console_reuses_one_pair_of_clients_and_refuses_a_browse_while_one_runs(
    topics: Topics, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _fill(topics)
    started: list[str] = []

    class Consumer(browser.AIOKafkaConsumer):  # type: ignore[misc]
        async def start(self) -> None:
            started.append("consumer")
            await super().start()

    class Admin(browser.AIOKafkaAdminClient):  # type: ignore[misc]
        async def start(self) -> None:
            started.append("admin")
            await super().start()

    monkeypatch.setattr(browser, "AIOKafkaConsumer", Consumer)
    monkeypatch.setattr(browser, "AIOKafkaAdminClient", Admin)
    s = topics.settings
    ctx = create_worker(
        Settings(
            database_url=database_url,
            kafka_bootstrap=s.kafka_bootstrap,
            topic_prefix=s.topic_prefix,
            app_id=s.app_id,
            worker_timer_process=False,
        )
    )
    client = TestClient(TestServer(ctx.app.web.web_app))
    await client.start_server()
    url = f"/console/dlq?topic={EVENTS}&format=json"
    try:
        for _ in range(3):
            assert (await client.get(url)).status == 200
        assert sorted(started) == ["admin", "consumer"]
        answers = await asyncio.gather(*(client.get(url) for _ in range(20)))
        statuses = sorted(r.status for r in answers)
        print(f"20 concurrent browses: {statuses.count(200)} served, {statuses.count(503)} 503")
        assert set(statuses) <= {200, 503} and statuses.count(503) >= 10
        assert all(r.headers["Retry-After"] == "1" for r in answers if r.status == 503)
        assert sorted(started) == ["admin", "consumer"]  # still the first pair: no new logins
    finally:
        await client.close()
        await ctx.runtime.close()

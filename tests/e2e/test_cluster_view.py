"""Each worker's status page lists the other workers of the same app, with a link to theirs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def two_workers(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[list[WorkerProcess]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = worker_env(module_database_url, kafka_bootstrap, module_topic_prefix)
    workers = [WorkerProcess(env, module_tmp, f"cluster-{i}").start() for i in range(2)]
    try:
        for w in workers:
            asyncio.run(w.wait_ready())
        yield workers
    finally:
        for w in workers:
            w.stop()


async def test_each_status_page_lists_both_workers_with_links(
    two_workers: list[WorkerProcess],
) -> None:
    urls = {f"http://127.0.0.1:{w.port}" for w in two_workers}

    def listed(worker: WorkerProcess) -> Any:
        async def probe() -> Any:
            status, body = await asyncio.to_thread(worker.get, "/status?format=json")
            found = {w["url"] for w in body.get("cluster", {}).get("workers", [])}
            return body if status == 200 and found == urls else None

        return probe

    for worker in two_workers:
        body = await eventually(listed(worker), timeout=60, what=f"{worker.name} lists both")
        mine = [w for w in body["cluster"]["workers"] if w["self"]]
        assert [w["url"] for w in mine] == [f"http://127.0.0.1:{worker.port}"]
        status, page = await asyncio.to_thread(worker.get, "/status")
        assert status == 200
        for url in urls:
            assert f'href="{url}"' in page

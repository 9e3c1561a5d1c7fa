"""Shared fixtures: a fresh migrated PostgreSQL database per test, real Kafka, unique topic names.

Integration and e2e tests never skip for a missing service: a fixture that cannot reach
PostgreSQL or Kafka fails the test with a message saying how to start the local stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from db.connector import create_pool
from db.migrate import migrate
from devkit import database

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://reminders@127.0.0.1:55432/reminders")
KAFKA_BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092")
HOW_TO_START = "start the local stack first: `make stack-up` (or run the tests with `make test`)"


@contextlib.contextmanager
def reachable() -> Iterator[None]:
    """Fail the test (never skip) when PostgreSQL's admin database cannot be reached."""
    try:
        yield
    except database.Unreachable as exc:
        pytest.fail(f"{exc}; {HOW_TO_START}")


async def _admin(sql: str) -> None:
    with reachable():
        await database.admin(DATABASE_URL, sql, timeout=10)


@pytest.fixture(scope="session")
def template_database() -> Iterator[str]:
    """A database migrated once per session; each test clones it (CREATE DATABASE ... TEMPLATE)."""
    name = f"tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with reachable():
        url = asyncio.run(database.create_database(DATABASE_URL, name, timeout=10))
    asyncio.run(migrate(url))
    yield name
    with reachable():
        asyncio.run(database.drop_database(DATABASE_URL, name, timeout=10))


@pytest.fixture
async def database_url(template_database: str) -> AsyncIterator[str]:
    """URL of a fresh, fully migrated database that only this test uses."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with reachable():
        async with database.scratch_database(
            DATABASE_URL, name, template=template_database, timeout=10
        ) as url:
            yield url


@pytest.fixture
async def empty_database_url() -> AsyncIterator[str]:
    """URL of a fresh database with no migrations applied (for migration tests)."""
    name = f"e_{uuid.uuid4().hex[:12]}"
    with reachable():
        async with database.scratch_database(DATABASE_URL, name, migrated=False, timeout=10) as url:
            yield url


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(database_url, min_size=1, max_size=10)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap address of the real broker; fails (never skips) when it is down."""

    async def probe() -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA_BOOTSTRAP, request_timeout_ms=10_000)
        try:
            await admin.start()
            await admin.list_topics()
        finally:
            await admin.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        pytest.fail(f"Kafka at {KAFKA_BOOTSTRAP} is not reachable ({exc!r}); {HOW_TO_START}")
    return KAFKA_BOOTSTRAP


@pytest.fixture
def topic_prefix() -> Iterator[str]:
    """A prefix that gives this test topics (and a consumer group) of its own; they are
    deleted afterwards."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    yield prefix
    forget_topics(prefix)


def forget_topics(prefix: str) -> None:
    """Delete the topics a test made under ``prefix`` (best effort: a test that stopped the
    broker, or never used Kafka, leaves nothing to do)."""
    from devkit.kafka import delete_topics_with_prefix

    with contextlib.suppress(Exception):
        asyncio.run(delete_topics_with_prefix(KAFKA_BOOTSTRAP, prefix))

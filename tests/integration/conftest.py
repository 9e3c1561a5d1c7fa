"""Integration fixtures: the calendar applier and dispatchers closed after each test, a private
Kafka broker for tests that freeze or stop it."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devkit.harness import calendar_dispatch
from devkit.harness.calendar import make_runtime
from devkit.stacks.private_stack import PrivateStack
from streams.slices.calendar.events import CalendarEventsApplier


@pytest.fixture
async def applier(database_url: str) -> AsyncIterator[CalendarEventsApplier]:
    a = CalendarEventsApplier(make_runtime(database_url))
    yield a
    await a.runtime.close()


@pytest.fixture
async def close_dispatchers(database_url: str) -> AsyncIterator[None]:
    """Closes the dispatchers a test made (``devkit.harness.calendar_dispatch.dispatcher``).

    Depends on database_url so that pools close before the database is dropped."""
    yield
    await calendar_dispatch.close_dispatchers()


@pytest.fixture
def private_kafka(tmp_path: Path) -> Iterator[PrivateStack]:
    """A broker of this test only, so that it can be frozen (its PostgreSQL is unused)."""
    stack = PrivateStack(tmp_path).up()
    try:
        yield stack
    finally:
        pid = stack.kafka_pid()
        if pid is not None:  # never leave it stopped: `down` could not end it
            os.kill(pid, signal.SIGCONT)
        stack.down()

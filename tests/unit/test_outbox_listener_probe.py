"""The relay's LISTEN connection as a probe of the database (streams/outbox/listener.py): once
lost it tries again at most every ``probe_interval`` (jittered), whatever the relay's backoff
has grown to, and each connect sets ``reconnected``, which ends the relay's backoff."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from streams.outbox import listener as listener_module
from streams.outbox.listener import NotifyListener, jittered


class FakeConnection:
    def __init__(self) -> None:
        self.closed = False

    def add_termination_listener(self, callback: Any) -> None:
        pass

    async def add_listener(self, channel: str, callback: Any) -> None:
        pass

    async def fetchval(self, sql: str) -> int:
        return 1

    async def close(self) -> None:
        self.closed = True

    def terminate(self) -> None:
        self.closed = True


async def test_a_lost_database_is_probed_every_probe_interval_not_every_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts: list[float] = []
    loop = asyncio.get_running_loop()

    async def connect(dsn: str, timeout: float) -> FakeConnection:
        attempts.append(loop.time())
        if len(attempts) <= 3:
            raise ConnectionRefusedError("database down")
        return FakeConnection()

    monkeypatch.setattr(listener_module, "connect", connect)
    wake, stopping = asyncio.Event(), asyncio.Event()
    listener = NotifyListener(
        "postgresql://x/y",
        wake,
        check_interval=30.0,
        backoff=lambda failures: 30.0,  # what the relay's backoff has grown to
        name="t",
        probe_interval=0.05,
    )
    task = asyncio.create_task(listener.run(stopping))
    try:
        await asyncio.wait_for(listener.reconnected.wait(), timeout=5)
        assert wake.is_set() and listener.listening.is_set()
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert len(attempts) == 4 and all(0.02 <= g < 1.0 for g in gaps), gaps
    finally:
        stopping.set()
        await asyncio.wait_for(task, timeout=5)


def test_jitter_stays_within_half_and_the_whole_delay() -> None:
    samples = [jittered(10.0) for _ in range(1000)]
    assert all(5.0 <= s <= 10.0 for s in samples)
    assert max(samples) - min(samples) > 2.0

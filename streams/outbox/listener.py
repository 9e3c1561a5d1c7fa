"""LISTEN/NOTIFY wake-ups for the relay, on a dedicated connection that heals itself."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import db.outbox as repo
from db.connector import Connection, connect
from streams import logs
from streams.asynctools import describe, wait_any

log = logging.getLogger("streams.outbox.relay")


class NotifyListener:
    """Sets ``wake`` on every NOTIFY of the outbox channel, and once after each (re)connect
    (NOTIFYs sent while nobody listened are gone: one pass catches up on them).

    A pooled connection would lose LISTEN on release, so this one is its own; it is pinged
    every ``check_interval`` (or at once after ``check_now``: a relay pass failed) to notice
    a silently dropped socket, and after a loss it tries to reconnect every
    ``backoff(failures)``, at most ``probe_interval``, jittered: a cheap probe of the
    database. Each connect sets ``reconnected``, which ends the relay's backoff.
    """

    def __init__(
        self,
        dsn: str,
        wake: asyncio.Event,
        *,
        check_interval: float,
        backoff: Callable[[int], float],
        name: str,
        probe_interval: float = 1.0,
    ) -> None:
        self._dsn = dsn
        self._wake = wake
        self._check_interval = check_interval
        self._backoff = backoff
        self._probe_interval = probe_interval
        self._name = name
        self.listening = asyncio.Event()
        self.reconnected = asyncio.Event()
        self.check_now = asyncio.Event()

    def _on_notify(self, _conn: Connection, _pid: int, _channel: str, _payload: str) -> None:
        self._wake.set()

    async def run(self, stopping: asyncio.Event) -> None:
        failures = 0
        while not stopping.is_set():
            conn: Connection | None = None
            lost = asyncio.Event()
            try:
                conn = await connect(self._dsn, timeout=10)
                conn.add_termination_listener(_setter(lost))
                await repo.listen(conn, self._on_notify)
                failures = 0
                self.listening.set()
                self.reconnected.set()
                self._wake.set()
                logs.event(
                    log, logging.INFO, "outbox_listen", relay=self._name, channel=repo.CHANNEL
                )
                while not (stopping.is_set() or lost.is_set()):
                    self.check_now.clear()
                    await wait_any(stopping, lost, self.check_now, within=self._check_interval)
                    if not (stopping.is_set() or lost.is_set()):
                        await asyncio.wait_for(repo.listener_ping(conn), timeout=10)
                if lost.is_set():
                    raise ConnectionError("LISTEN connection closed")
            except Exception as exc:
                failures += 1
                logs.event(
                    log,
                    logging.WARNING,
                    "outbox_listen_lost",
                    relay=self._name,
                    attempt=failures,
                    error=describe(exc),
                )
            finally:
                self.listening.clear()
                if conn is not None:
                    await _close_quietly(conn)
            if not stopping.is_set():
                delay = min(self._backoff(failures), self._probe_interval)
                await wait_any(stopping, within=jittered(delay))


def jittered(delay: float) -> float:
    """``delay`` scaled by a random factor in [0.5, 1]: retries of several relays (and
    workers) after one outage spread out instead of arriving together."""
    return delay * random.uniform(0.5, 1.0)


def _setter(event: asyncio.Event) -> Callable[[Any], None]:
    return lambda _conn: event.set()


async def _close_quietly(conn: Connection) -> None:
    try:
        await asyncio.wait_for(conn.close(), timeout=5)
    except asyncio.CancelledError:
        conn.terminate()
        raise
    except Exception:
        conn.terminate()

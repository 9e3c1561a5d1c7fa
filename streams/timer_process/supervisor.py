"""The worker's side of its timer process: start it, restart it, talk to it, stop it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from streams import logs
from streams.asynctools import describe, wait_any
from streams.metrics import Metrics, StaticCollector, families_from_json
from streams.timer_process import wire

log = logging.getLogger("streams.timer_process")

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
HEALTHY_AFTER = 60.0  # a child that ran this long starts the backoff ladder afresh


class TimerProcessMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.up = Gauge(
            "reminders_worker_timer_process_up",
            "1 while the worker's timer process runs and answered ready",
            registry=registry,
        )
        self.restarts = Counter(
            "reminders_worker_timer_process_restarts_total",
            "Times the worker's timer process exited and was started again",
            registry=registry,
        )
        self.stalls = Counter(
            "reminders_worker_timer_process_stalls_total",
            "Times the worker's timer process went silent (no heartbeat) past the stall bound",
            registry=registry,
        )
        self.stall_kills = Counter(
            "reminders_worker_timer_process_stall_kills_total",
            "Times the worker killed its silent timer process (to start it again)",
            registry=registry,
        )


class TimerProcess:
    """Runs ``command`` (the timer process) as a child and keeps it running until ``stop()``.

    Wake-ups sent while it is down are kept (the earliest per schedule) and sent once it is
    ready again. ``refresh()`` fetches its timers and metrics; the metrics join the parent's
    registry (a MergingRegistry), so /metrics and /status show the worker as one.

    The child beats (wire.py), and each beat says how long each of its loops (a schedule, the
    relay) may still take before its next turn. With ``stall_seconds`` set, a child silent
    that long, or one of whose loops is that late, is not ``ready`` (``stalled``); silent or
    late for ``kill_after`` it is killed and started again.
    """

    def __init__(
        self,
        metrics: Metrics,
        worker_id: str,
        names: Sequence[str],
        *,
        command: Sequence[str] | None = None,
        ready_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        stall_seconds: float | None = None,
        kill_after: float | None = None,
    ) -> None:
        self.names = tuple(names)
        self.worker_id = worker_id
        self.command = list(
            command or [sys.executable, "-m", "streams.timer_process", "--worker-id", worker_id]
        )
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.stall_seconds = stall_seconds
        self.kill_after = kill_after
        self._heard = 0.0  # monotonic time of the child's last line
        self._due: dict[str, float] = {}  # per loop of the child, when its next turn is due
        self._stalled = False
        self._metrics = metrics.family(TimerProcessMetrics)
        self._peer = StaticCollector()
        metrics.registry.register(self._peer)
        self._proc: asyncio.subprocess.Process | None = None
        self._ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._pending: dict[str, datetime | None] = {}
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self.timers: list[dict[str, Any]] = []
        self.pid: int | None = None
        self.started = 0

    @property
    def ready(self) -> bool:
        """Running, answered ready, and heard from within ``stall_seconds``."""
        return self._ready.is_set() and not self.stalled

    @property
    def silent_for(self) -> float:
        """Seconds since the running child's last line (0 while it is not running)."""
        return time.monotonic() - self._heard if self._ready.is_set() else 0.0

    @property
    def late(self) -> tuple[str, float]:
        """What of the running child is the most behind, and by how many seconds: ``silent``
        (since its last line) or one of its loops (past the turn it promised). A child silent
        past ``stall_seconds`` is ``silent`` whatever its loops last said: their figures come
        from its last line and say nothing about a child that stopped (a loop already late
        in that line would otherwise name the stall for as long as the child says nothing)."""
        if not self._ready.is_set():
            return "silent", 0.0
        now = time.monotonic()
        worst = ("silent", now - self._heard)
        if self.stall_seconds is not None and worst[1] > self.stall_seconds:
            return worst
        for source, due in self._due.items():
            if now - due > worst[1]:
                worst = (source, now - due)
        return worst

    @property
    def stalled(self) -> bool:
        return self.stall_seconds is not None and self.late[1] > self.stall_seconds

    async def start(self) -> None:
        """Start the child and wait (up to ``ready_timeout``) until it runs; a child that is
        not ready by then is waited for in the background (the worker runs on, /health says
        so). Once started, ``start()`` again only waits for it to be ready."""
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name="timer-process-supervisor")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready.wait()), self.ready_timeout)
        except TimeoutError:
            logs.event(log, logging.ERROR, "timer_process_not_ready", within_s=self.ready_timeout)

    def wake(self, name: str, at: datetime | None) -> None:
        """Forward a wake-up (the registry's delegate for isolated schedules)."""
        proc = self._proc
        if self._ready.is_set() and proc is not None and proc.stdin is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                proc.stdin.write(wire.wake(name, at))
                return
        if name in self._pending:
            kept = self._pending[name]
            at = None if at is None or kept is None else min(at, kept)
        self._pending[name] = at

    async def refresh(self, timeout: float = 1.0) -> bool:
        """Fetch the child's timers and metrics; False (keeping the last ones) if it is down
        or does not answer within ``timeout``."""
        proc = self._proc
        if not self._ready.is_set() or proc is None or proc.stdin is None:
            return False
        ident = next(self._ids)
        reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[ident] = reply
        try:
            proc.stdin.write(wire.encode({"op": "snapshot", "id": ident}))
            answer = await asyncio.wait_for(reply, timeout)
        except (TimeoutError, ConnectionError, RuntimeError):
            return False
        finally:
            self._replies.pop(ident, None)
        self.timers = list(answer.get("timers", []))
        self._peer.families = families_from_json(answer.get("metrics", []))
        return True

    async def stop(self) -> None:
        """Ask the child to stop (its runs finish, the relay's last pass commits), wait up to
        ``stop_timeout``, then kill it."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.write(wire.encode({"op": "stop"}))
                    proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), self.stop_timeout)
            except TimeoutError:
                logs.event(log, logging.WARNING, "timer_process_stop_timeout", pid=proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                code = await self._run_child()
            except Exception as exc:
                code = None
                logs.event(log, logging.ERROR, "timer_process_failed", error=describe(exc))
            if self._stopping.is_set():
                break
            failures = 1 if time.monotonic() - began > HEALTHY_AFTER else failures + 1
            delay = min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (failures - 1))
            self._metrics.restarts.inc()
            logs.event(
                log,
                logging.ERROR,
                "timer_process_exited",
                code=code,
                restart_in_s=delay,
                restarts=failures,
            )
            await wait_any(self._stopping, within=delay)

    async def _run_child(self) -> int:
        proc = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 24,
        )
        self._proc, self.pid = proc, proc.pid
        self.started += 1
        assert proc.stdout is not None
        watchdog = asyncio.create_task(self._watch(proc), name="timer-process-watchdog")
        try:
            async for line in proc.stdout:
                self._heard = time.monotonic()
                try:
                    message = wire.decode(line)
                except ValueError as exc:
                    logs.event(log, logging.ERROR, "timer_process_bad_message", error=describe(exc))
                    continue
                if message["op"] == "beat":
                    self._beat(message)
                if self._stalled and not self.stalled:
                    self._stalled = False
                    self._metrics.up.set(1)
                    logs.event(log, logging.WARNING, "timer_process_resumed", pid=proc.pid)
                if message["op"] == "beat":
                    continue
                if message["op"] == "ready":
                    self._on_ready(proc)
                elif message["op"] == "snapshot":
                    reply = self._replies.get(int(message.get("id") or 0))
                    if reply is not None and not reply.done():
                        reply.set_result(message)
            return await proc.wait()
        finally:
            watchdog.cancel()
            self._ready.clear()
            self._due = {}
            self._stalled = False
            self._metrics.up.set(0)
            for reply in self._replies.values():
                if not reply.done():
                    reply.set_exception(ConnectionError("the timer process exited"))
            if proc.returncode is None:  # cancelled (stop() gave up): do not leave it behind
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            self._proc = None

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        """Mark a silent child stalled, and kill it once silent for ``kill_after`` (its exit
        ends ``_run_child``; the supervisor starts another)."""
        bounds = [b for b in (self.stall_seconds, self.kill_after) if b is not None]
        if not bounds:
            return
        tick = min(1.0, min(bounds) / 4)
        while proc.returncode is None:
            await asyncio.sleep(tick)
            what, late = self.late
            if self.stalled and not self._stalled:
                self._stalled = True
                self._metrics.stalls.inc()
                self._metrics.up.set(0)
                logs.event(
                    log, logging.ERROR, "timer_process_stalled", pid=proc.pid, late=what, for_s=late
                )
            if self.kill_after is not None and late > self.kill_after:
                logs.event(
                    log, logging.ERROR, "timer_process_killed", pid=proc.pid, late=what, for_s=late
                )
                self._metrics.stall_kills.inc()
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                return

    def _beat(self, message: dict[str, Any]) -> None:
        try:
            left = wire.beat_left(message)
        except (TypeError, ValueError) as exc:
            logs.event(log, logging.ERROR, "timer_process_bad_message", error=describe(exc))
            return
        now = time.monotonic()
        self._due = {source: now + seconds for source, seconds in left.items()}

    def _on_ready(self, proc: asyncio.subprocess.Process) -> None:
        logs.event(
            log, logging.INFO, "timer_process_ready", pid=proc.pid, schedules=",".join(self.names)
        )
        self._ready.set()
        self._metrics.up.set(1)
        pending, self._pending = self._pending, {}
        for name, at in pending.items():
            self.wake(name, at)

"""The timer process itself (``python -m streams.timer_process --worker-id ID``): runs the
isolated schedules and the outbox relay until its parent closes its stdin, says stop, or a
SIGTERM arrives (SIGINT is left to the parent); answers the parent's requests (wire.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

from streams import logs, tracing
from streams.asynctools import describe, wait_any
from streams.errors import install_log_redaction
from streams.metrics import families_to_json
from streams.outbox.config import RelayResult
from streams.outbox.relay import OutboxRelay
from streams.settings import Settings
from streams.timer_process import wire
from streams.timer_process.progress import Progress

log = logging.getLogger("streams.timer_process")
# Each of its lines says it comes from the timer process (its worker's share its stderr).
PROCESS = "timer-process"


async def _pipes(in_fd: int, out_fd: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(in_fd, "rb", 0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(out_fd, "wb", 0)
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer


RELAY = "outbox-relay"  # the relay's name among the loops a beat reports


class WatchedRelay(OutboxRelay):
    """The relay, telling ``progress`` at each pass by when its next pass comes.

    A pass is bounded by its Kafka timeouts: starting a producer (``publish_timeout``),
    waiting for acknowledgements (``in_doubt_timeout`` in all, a broker failover included)
    and stopping or aborting producers (``producer_stop_timeout``, up to three per pass).
    After a pass the loop waits at most ``max_backoff`` (and may refresh its gauges, one
    statement) before the next one.
    """

    progress: Progress | None = None

    async def run_once(self) -> RelayResult:
        config = self.config
        bound = config.publish_timeout + config.in_doubt_timeout + 3 * config.producer_stop_timeout
        self._turn(bound)
        try:
            return await super().run_once()
        finally:
            self._turn(config.max_backoff + config.publish_timeout)

    def _turn(self, within: float) -> None:
        if self.progress is not None:
            self.progress.turn(RELAY, within)


def sender(writer: asyncio.StreamWriter, gone: asyncio.Event) -> Callable[[bytes], bool]:
    """Writes a message to the parent; False, and ``gone`` set, once the parent's end of the
    pipe is closed (it died or is stopping): the child then stops, it does not crash."""

    def send(data: bytes) -> bool:
        try:
            writer.write(data)
        except (ConnectionError, RuntimeError) as exc:  # uvloop: RuntimeError, handle closed
            if not gone.is_set():
                logs.event(log, logging.INFO, "timer_process_parent_gone", error=type(exc).__name__)
            gone.set()
            return False
        return True

    return send


async def beat(
    send: Callable[[bytes], bool], progress: Progress, interval: float, stopping: asyncio.Event
) -> None:
    """The parent's watch: every ``interval`` how long each loop may still take before its
    next turn. A stopped event loop goes silent; a loop stuck in an await goes late."""
    while not stopping.is_set() and send(wire.beat(progress.left())):
        await wait_any(stopping, within=interval)


async def run(settings: Settings, worker_id: str, in_fd: int, out_fd: int) -> int:
    from streams.timer_app import create_timers

    ctx = create_timers(settings, worker_id=worker_id)
    registry, runtime = ctx.registry, ctx.runtime
    isolated = [n for n in registry.names if registry.get(n).isolated]
    registry.delegate([n for n in registry.names if n not in isolated], _runs_in_the_worker)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Ctrl-C reaches the whole foreground group: the worker stops its child itself (stop
    # message, or end-of-file), so the child does not race it and get restarted.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    reader, writer = await _pipes(in_fd, out_fd)
    # Every loop promises its next turn; the beat carries how much of each promise is left,
    # so a loop stuck in an await is late even while the event loop (and the beat) runs.
    progress = Progress()
    registry.report_turns(progress.turn)
    relay = WatchedRelay.from_settings(
        settings, metrics=runtime.metrics.outbox, pool=await runtime.pool(), clock=runtime.clock
    )
    assert isinstance(relay, WatchedRelay)
    relay.progress = progress
    # The schedules need only PostgreSQL: they start first, and a relay that finds Kafka down
    # starts anyway (its passes retry the producer), so neither keeps the other from running.
    await registry.start()
    await relay.start()
    for name in isolated:  # catch up on what came due while no process ran them
        if registry.get(name).enabled:
            registry.wake(name)
    logs.event(
        log, logging.INFO, "timer_process_started", worker=worker_id, schedules=",".join(isolated)
    )
    send = sender(writer, stopping)
    send(wire.encode({"op": "ready", "pid": os.getpid()}))

    async def serve() -> None:
        while not stopping.is_set():
            line = await reader.readline()
            if not line:  # the parent is gone (or closed its end): stop
                logs.event(log, logging.INFO, "timer_process_parent_gone", worker=worker_id)
                return
            try:
                message = wire.decode(line)
                answer = handle(message)
            except (ValueError, KeyError) as exc:
                logs.event(log, logging.ERROR, "timer_process_bad_message", error=describe(exc))
                continue
            if message["op"] == "stop":
                return
            if answer is not None and send(wire.encode(answer)):
                await writer.drain()

    def handle(message: dict[str, Any]) -> dict[str, Any] | None:
        op = message["op"]
        if op == "wake":
            registry.wake(str(message["name"]), wire.wake_time(message))
        elif op == "snapshot":
            return {
                "op": "snapshot",
                "id": message.get("id"),
                "timers": registry.list(),
                "metrics": families_to_json(runtime.metrics.registry),
            }
        elif op != "stop":
            raise ValueError(f"unknown op {op!r}")
        return None

    server = asyncio.create_task(serve(), name="timer-process-serve")
    interval = wire.beat_interval(settings.worker_timer_process_stall_seconds)
    beating = asyncio.create_task(
        beat(send, progress, interval, stopping), name="timer-process-beat"
    )
    signalled = asyncio.create_task(stopping.wait())
    await asyncio.wait({server, signalled}, return_when=asyncio.FIRST_COMPLETED)
    stopping.set()
    for task in (server, beating, signalled):
        task.cancel()
    await asyncio.gather(server, beating, signalled, return_exceptions=True)
    # Runs finish (or roll back) first, so the relay's last pass sees their outbox rows.
    await registry.stop(timeout=20, cancel_grace=5)
    await relay.stop()
    await runtime.close()
    with contextlib.suppress(Exception):
        writer.close()
    logs.event(log, logging.INFO, "timer_process_stopped", worker=worker_id)
    return 0


def _runs_in_the_worker(name: str, at: datetime | None) -> None:
    raise ValueError(f"timer schedule {name!r} runs in the worker, not its timer process")


def main(argv: list[str] | None = None) -> int:
    import gc

    from streams.settings import ConfigError, load_settings

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--worker-id":
        print("usage: python -m streams.timer_process --worker-id ID", file=sys.stderr)
        return 2
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    install_log_redaction()
    logs.configure_from(settings, process=PROCESS)
    tracing.configure(process=PROCESS)
    # The protocol keeps the original stdout to itself; anything printed goes to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    if settings.event_loop == "uvloop":
        import uvloop

        uvloop.install()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    return asyncio.run(run(settings, args[1], 0, out_fd))

"""Run one outbox relay standalone until SIGTERM/SIGINT: ``python -m streams.outbox``."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from streams import logs, tracing
from streams.errors import describe, install_log_redaction
from streams.metrics import Metrics
from streams.outbox.config import RelayConfig
from streams.outbox.relay import OutboxRelay
from streams.settings import ConfigError, Settings, load_settings

log = logging.getLogger("streams.outbox")


async def serve(settings: Settings) -> int:
    """Exit status 0 after a signal and a graceful stop, 1 if the relay cannot start."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    relay = OutboxRelay.from_settings(settings, metrics=Metrics().outbox)
    try:
        await relay.start()
    except Exception as exc:
        logs.event(log, logging.ERROR, "outbox_relay_start_failed", error=describe(exc))
        await relay.stop()
        return 1
    try:
        await stop.wait()
    finally:
        await relay.stop()
    return 0


def main() -> int:
    try:
        settings = load_settings()
        RelayConfig.from_settings(settings)  # bad relay settings stop here, named
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    install_log_redaction()
    logs.configure_from(settings)
    tracing.configure(process="relay")
    return asyncio.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())

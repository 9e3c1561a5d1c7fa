"""key=value log lines of the timer registry: an ``action`` first, identifiers only, never PII."""

from __future__ import annotations

import logging
from datetime import datetime

from streams import logs
from streams.timers.slots import iso_utc

log = logging.getLogger("streams.timers")

fmt = logs.fmt


def event(level: int, action: str, **fields: object) -> None:
    """Log ``action=<action> k=v ...`` on the timers' logger (streams/logs.py's ``event``)."""
    if log.isEnabledFor(level):
        logs.event(log, level, action, **fields)


def iso(when: datetime | None) -> str | None:
    return None if when is None else iso_utc(when)

"""key=value log lines of the timer registry: an ``action`` first, identifiers only, never PII."""

from __future__ import annotations

import json
import logging
from datetime import datetime

from streams.timers.slots import iso_utc

log = logging.getLogger("streams.timers")


def fmt(value: object) -> str:
    """One value as it appears after ``key=``: ``-`` for None, UTC ISO instants, quoted text."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    if not text or any(c in text for c in ' ="'):
        return json.dumps(text)
    return text


def event(level: int, action: str, **fields: object) -> None:
    """Log ``action=<action> k=v ...``; an ``exc_info`` exception is attached, not formatted."""
    if log.isEnabledFor(level):
        exc = fields.pop("exc_info", None)
        parts = [f"action={action}", *(f"{k}={fmt(v)}" for k, v in fields.items())]
        log.log(level, " ".join(parts), exc_info=exc if isinstance(exc, BaseException) else None)


def iso(when: datetime | None) -> str | None:
    return None if when is None else iso_utc(when)

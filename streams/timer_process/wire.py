"""The messages between a worker and its timer process: one JSON object per line.

Parent → child: ``{"op": "wake", "name": N, "at": ISO | null}``,
``{"op": "snapshot", "id": K}`` and ``{"op": "stop"}``.
Child → parent: ``{"op": "ready", "pid": P}`` once its relay and timers run,
``{"op": "beat", "left": {source: seconds}}`` every ``beat_interval(stall)``: for each of
its loops (a schedule, the relay) the seconds left before that loop's next turn is due,
negative once it is late (progress.py; the parent's watch), and
``{"op": "snapshot", "id": K, "timers": [...], "metrics": [...]}`` in answer.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=str).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    message = json.loads(line)
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise ValueError(f"not a timer-process message: {line[:200]!r}")
    return message


def wake(name: str, at: datetime | None) -> bytes:
    return encode({"op": "wake", "name": name, "at": at.isoformat() if at else None})


def wake_time(message: dict[str, Any]) -> datetime | None:
    at = message.get("at")
    return datetime.fromisoformat(at) if at else None


BEAT = encode({"op": "beat"})


def beat(left: dict[str, float]) -> bytes:
    return encode({"op": "beat", "left": left})


def beat_left(message: dict[str, Any]) -> dict[str, float]:
    """A beat's per-loop seconds left (none in a bare beat)."""
    left = message.get("left") or {}
    if not isinstance(left, dict):
        raise ValueError(f"not a beat: {message!r}")
    return {str(source): float(seconds) for source, seconds in left.items()}


def beat_interval(stall_seconds: float) -> float:
    """How often the child beats: several beats fit in the parent's stall bound."""
    return min(5.0, stall_seconds / 5)

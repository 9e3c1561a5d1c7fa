"""The worst problems of the moment on one worker, ranked, from the /status data and the readiness checks (the overview's banner).

A pure function of plain data: the page shows the first one (and counts the others), each
with a link to where to look.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.console.layout import humanize_seconds

# Ranks, worst first: input that does not move, a worker that cannot do its job, records
# Kafka refused for good, rows that need a person, runs that failed, then dead letters.
CRASHED, STALLED, NOT_READY, PARKED, OUTBOX_LATE, HELD, POISON, FAILED_RUN, DEAD_LETTERS = range(9)
OUTBOX_LATE_SECONDS = 60.0


@dataclass(frozen=True)
class Problem:
    rank: int
    title: str
    detail: str
    href: str


def problems(data: dict[str, Any], ready: bool, checks: dict[str, Any]) -> list[Problem]:
    """Every problem the data shows, worst first (an empty list: all clear)."""
    found: list[Problem] = []
    for agent in data.get("agents") or []:
        name = str(agent.get("agent", ""))
        if agent.get("crashed"):
            found.append(
                Problem(CRASHED, f"agent {name} crashed", "its input is not read", "#agents")
            )
        for s in agent.get("stalled") or []:
            found.append(
                Problem(
                    STALLED,
                    f"partition {s.get('partition')} stalled",
                    f"{name}: lag {s.get('lag')}, not moving for {_secs(s.get('seconds'))}",
                    "#agents",
                )
            )
    if not ready:
        failing = [k for k, v in checks.items() if not _check_ok(k, v)]
        found.append(
            Problem(NOT_READY, "worker not ready", ", ".join(failing) or "see /health", "/health")
        )
    outbox = data.get("outbox") or {}
    if outbox.get("parked"):
        found.append(
            Problem(
                PARKED,
                f"{_n(outbox['parked'])} outbox rows parked",
                "Kafka refused them for good: python -m streams outbox parked",
                "#outbox",
            )
        )
    age = outbox.get("oldest_unpublished_age_seconds")
    if isinstance(age, int | float) and age > OUTBOX_LATE_SECONDS:
        found.append(
            Problem(
                OUTBOX_LATE,
                "outbox not draining",
                f"oldest unpublished record waits {_secs(age)} ({_n(outbox.get('backlog'))} waiting)",
                "#outbox",
            )
        )
    automation = data.get("automation") or {}
    if automation.get("on_hold"):
        found.append(
            Problem(
                HELD,
                f"{_n(automation['on_hold'])} automation rows on support hold",
                "they wait for release or retry-key",
                str(automation.get("hold_view") or "#automation"),
            )
        )
    calendar = data.get("calendar") or {}
    if calendar.get("backing_off"):
        found.append(
            Problem(
                POISON,
                f"{_n(calendar['backing_off'])} calendar reminders backing off",
                "due rows whose dispatch failed (poison): they are retried with backoff",
                "#calendar",
            )
        )
    for timer in data.get("timers") or []:
        result = timer.get("last_result")
        if result not in (None, "ok"):
            found.append(
                Problem(
                    FAILED_RUN,
                    f"timer {timer.get('name')}: last run {result}",
                    str(timer.get("last_error") or ""),
                    "/timers",
                )
            )
    dead = sum(int(a.get("errors") or 0) for a in data.get("agents") or [])
    if dead:
        found.append(
            Problem(
                DEAD_LETTERS,
                f"{dead} input messages dead-lettered",
                "since this worker started",
                "/console/dlq",
            )
        )
    return sorted(found, key=lambda p: p.rank)


def _check_ok(name: str, value: Any) -> bool:
    if name == "assigned_partitions":
        return True
    if name == "recovery":
        return bool(value == "done")
    if isinstance(value, list | dict):
        return not value
    return not isinstance(value, str) or value == "ok"  # a count, a flag: not a failure


def _n(value: Any) -> str:
    return str(int(value)) if isinstance(value, int | float) else str(value)


def _secs(value: Any) -> str:
    return humanize_seconds(float(value)) if isinstance(value, int | float) else ""

"""What runs of a schedule did: one record per run, per-schedule statistics, result summaries."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_SUMMARY_CHARS = 500


@dataclass(frozen=True)
class RunRecord:
    """What happened to one slot (or wake-up) of one schedule in this worker."""

    schedule: str
    run_id: str
    # on_time, catch_up, coalesced, reclaimed (taken over from a claimant that died or
    # stalled mid-run) or wake
    kind: str
    slot: datetime | None
    as_of: datetime
    # ok, failed, timeout, cancelled - or deduped when another worker owns the slot, or
    # paused when the schedule was paused cluster-wide (not started)
    result: str
    started_at: datetime | None = None
    duration_seconds: float | None = None
    summary: Any = None
    error: str | None = None


@dataclass
class RunStats:
    """Counters and the latest run of one schedule in this worker (what /timers shows)."""

    runs: int = 0
    failed: int = 0
    timed_out: int = 0
    cancelled: int = 0
    skipped_overlap: int = 0
    deduped: int = 0
    missed: int = 0
    wakes: int = 0
    claim_retries: int = 0
    reclaimed: int = 0
    lease_lost: int = 0
    # Cluster-once slots released for another attempt, handed back on a graceful stop, and
    # given up (the attempt bound reached).
    retries: int = 0
    handed_back: int = 0
    given_up: int = 0
    # Runs not started because the schedule was paused cluster-wide.
    paused: int = 0
    last_slot: datetime | None = None
    last_started_at: datetime | None = None
    last_duration_seconds: float | None = None
    last_result: str | None = None
    last_summary: Any = None
    last_error: str | None = None
    last_run_id: str | None = None

    def started(self, run_id: str, slot: datetime | None, at: datetime) -> None:
        if slot is not None:
            self.last_slot = slot
        self.last_started_at = at
        self.last_run_id = run_id

    def ended(self, result: str, summary: Any, error: str | None, duration: float | None) -> None:
        """Count one run's outcome (ok, failed, timeout or cancelled) and keep it as the last."""
        self.runs += 1
        if result == "failed":
            self.failed += 1
        elif result == "timeout":
            self.timed_out += 1
        elif result == "cancelled":
            self.cancelled += 1
        self.last_result = result
        self.last_summary = summary
        self.last_error = error
        self.last_duration_seconds = duration

    def counts(self) -> dict[str, int]:
        return {
            "runs": self.runs,
            "failed": self.failed,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "skipped_overlap": self.skipped_overlap,
            "deduped": self.deduped,
            "missed": self.missed,
            "wakes": self.wakes,
            "claim_retries": self.claim_retries,
            "reclaimed": self.reclaimed,
            "lease_lost": self.lease_lost,
            "retries": self.retries,
            "handed_back": self.handed_back,
            "given_up": self.given_up,
            "paused": self.paused,
        }


def summarize(value: object) -> Any:
    """A short JSON-able summary of a handler result (its summary(), a dataclass, or repr)."""
    try:
        method = getattr(value, "summary", None)
        if callable(method):
            value = method()
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        text = json.dumps(value, default=str)
    except Exception:
        return repr(value)[:_SUMMARY_CHARS]
    if len(text) > _SUMMARY_CHARS:
        return text[:_SUMMARY_CHARS]
    return json.loads(text)

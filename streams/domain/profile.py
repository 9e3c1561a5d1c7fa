"""Document expiry rules (seed 001), pure: DaysLeft by UTC date, crossed thresholds, t*, the
scan window, threshold settings and the per-owner marks cache's value."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar
from uuid import UUID

K = TypeVar("K")
_NONE: frozenset[int] = frozenset()

DEFAULT_THRESHOLDS: tuple[int, ...] = (30, 7, 1, 0)
# Markers of documents that expired more than this many days before AsOf.Date are pruned
# (seed: "ExpiresAt < AsOf.Date - 90 days"); the scan never looks further back either.
RETENTION_DAYS = 90
# Longest threshold accepted: ten years ahead keeps date arithmetic far from year 9999.
MAX_THRESHOLD_DAYS = 3650
MAX_THRESHOLDS = 32


def normalize_thresholds(values: Iterable[int]) -> tuple[int, ...]:
    """Thresholds as the job uses them: distinct, descending; raises ValueError when empty,
    negative, above MAX_THRESHOLD_DAYS or not whole numbers."""
    out: set[int] = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"threshold {value!r} is not a whole number of days")
        if not 0 <= value <= MAX_THRESHOLD_DAYS:
            raise ValueError(f"threshold {value} must be between 0 and {MAX_THRESHOLD_DAYS} days")
        out.add(value)
    if not out:
        raise ValueError("at least one threshold is required")
    if len(out) > MAX_THRESHOLDS:
        raise ValueError(f"at most {MAX_THRESHOLDS} thresholds")
    return tuple(sorted(out, reverse=True))


def parse_thresholds(text: str) -> tuple[int, ...]:
    """``30,7,1,0`` or ``[30, 7, 1, 0]`` → normalized thresholds (ValueError otherwise)."""
    raw = text.strip()
    if raw.startswith("["):
        try:
            parsed = json.loads(raw)
        except ValueError:
            raise ValueError(f"not a JSON list of days: {text!r}") from None
        if not isinstance(parsed, list):
            raise ValueError(f"not a list of days: {text!r}")
        return normalize_thresholds(parsed)
    values: list[int] = []
    for part in raw.split(","):
        item = part.strip()
        if not item.lstrip("-").isdigit():
            raise ValueError(f"threshold {item!r} is not a whole number of days")
        values.append(int(item))
    return normalize_thresholds(values)


def utc_date(as_of: datetime) -> date:
    """AsOf.Date: the UTC calendar date of the run (no investor time zone, by the seed)."""
    if as_of.tzinfo is None or as_of.utcoffset() is None:
        raise ValueError("as_of must be timezone-aware")
    return as_of.astimezone(UTC).date()


def days_left(expires_at: date, today: date) -> int:
    """ExpiresAt.DayNumber - AsOf.Date.DayNumber (negative once expired)."""
    return (expires_at - today).days


def crossed(left: int, thresholds: Iterable[int]) -> frozenset[int]:
    """{t in thresholds : DaysLeft <= t}."""
    return _crossed(left, thresholds if isinstance(thresholds, tuple) else tuple(thresholds))


@lru_cache(maxsize=8192)
def _crossed(left: int, thresholds: tuple[int, ...]) -> frozenset[int]:
    # A run asks for the same few hundred (DaysLeft, thresholds) pairs a million times.
    return frozenset(t for t in thresholds if left <= t)


def t_star(crossed_thresholds: Set[int], marked: Set[int]) -> int | None:
    """The most urgent crossed threshold not yet marked, or None when all are marked."""
    remaining = crossed_thresholds - marked
    return min(remaining) if remaining else None


@dataclass(frozen=True)
class Window:
    """ExpiresAt range a run scans: ``lo`` (the retention horizon) .. ``hi`` (AsOf.Date +
    the largest threshold), both inclusive."""

    lo: date
    hi: date

    def __contains__(self, expires_at: object) -> bool:
        return isinstance(expires_at, date) and self.lo <= expires_at <= self.hi


def scan_window(today: date, thresholds: Iterable[int]) -> Window:
    """dueDateMax = AsOf.Date + MaxThreshold. The lower bound is the prune horizon: markers of
    older documents are deleted, so scanning them would remind again every day."""
    return Window(prune_before(today), today + timedelta(days=max(thresholds)))


def prune_before(today: date) -> date:
    """Markers with ExpiresAt before this date are deleted at the end of a run."""
    return today - timedelta(days=RETENTION_DAYS)


@dataclass(frozen=True)
class Decision:
    """What one document needs in one run, given the marks known for it."""

    document_id: UUID
    days_left: int
    crossed: frozenset[int]
    to_mark: tuple[int, ...]
    """Crossed thresholds without a known marker, descending: all of them are marked."""
    notify: int | None
    """t*: the only threshold a reminder is sent for (None: nothing new)."""


def decide(
    document_id: UUID,
    expires_at: date,
    today: date,
    thresholds: Iterable[int],
    marked: Set[int],
) -> Decision:
    left = days_left(expires_at, today)
    hit = crossed(left, thresholds)
    todo = hit - marked if marked else hit
    return Decision(
        document_id, left, hit, tuple(sorted(todo, reverse=True)), min(todo) if todo else None
    )


def settled_by(crossed_by_doc: Mapping[K, Set[int]], claimed: Mapping[K, Set[int]]) -> bool:
    """True when ``claimed`` says every crossed threshold of every document is marked (the
    owner has nothing to do if the claim is true; it must be verified before it is believed)."""
    return all(hit <= claimed.get(doc, _NONE) for doc, hit in crossed_by_doc.items())


def encode_marks(marks: Mapping[K, Set[int]]) -> str:
    """The cache value of one owner: ``document=t,t;document=t`` (thresholds descending,
    documents without a mark left out). One short string: the table stores and changelogs
    it as one JSON string, far cheaper than a nested object."""
    return ";".join(f"{doc}={_thresholds_text(frozenset(ts))}" for doc, ts in marks.items() if ts)


@lru_cache(maxsize=1024)
def _thresholds_text(ts: frozenset[int]) -> str:
    return ",".join(str(t) for t in sorted(ts, reverse=True))


def decode_marks(value: Any) -> dict[str, frozenset[int]]:
    """The marks a cache value claims, by document id as text; anything malformed (or in a
    format this version does not write) claims nothing: a damaged cache costs a round trip,
    never a decision."""
    if not isinstance(value, str) or not value:
        return {}
    out: dict[str, frozenset[int]] = {}
    for part in value.split(";"):
        doc, sep, text = part.partition("=")
        if not sep or not doc or not text:
            return {}
        ts = text.split(",")
        if not all(t.isascii() and t.isdigit() for t in ts):
            return {}
        out[doc] = frozenset(int(t) for t in ts)
    return out

"""A listing of the console: which rows of one table a slice shows, by state, with which filters,
in which keyset order; and the pure rules of its query (filter values, cursor, bounds).

Each slice declares its listings in ``streams/slices/<slice>/listings.py`` (its ``Slice``
carries them); ``streams/console/rows.py`` runs them for the web pages and the CLI.
Pages are keyset pages on ``(time_column, id_column)``: the cursor (``after``) is the last
row's pair, opaque to the reader; a page is one index range, never an OFFSET.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any, Literal
from uuid import UUID

IdKind = Literal["uuid", "int", "text"]

OPTIONAL_FILTERS = {
    "tenant": "the event's TenantId",
    "owner": "the owner's UserId",
    "bu": "the business unit (BusinessUnitId)",
    "key_prefix": "the start of the row's key",
}
"""Filters a listing may offer; ``state``, ``from``, ``to``, ``after`` and ``limit`` are common."""
COMMON = ("state", "from", "to", "after", "limit")
IGNORED = ("format",)  # how the page is returned, not what it holds

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_KEY_PREFIX = 1024

# The ends of a window left open (PostgreSQL's timestamptz holds both).
FLOOR = datetime(1, 1, 1, tzinfo=UTC)
CEILING = datetime(9999, 12, 31, tzinfo=UTC)
# Below every real id of its kind: a bound (t, MIN_ID) starts at t exactly.
MIN_ID: dict[str, Any] = {"uuid": UUID(int=0), "int": -(2**63), "text": ""}


class FilterError(ValueError):
    """A query parameter the listing cannot take; ``param`` names it."""

    def __init__(self, param: str, why: str) -> None:
        super().__init__(f"{param}: {why}")
        self.param = param


@dataclass(frozen=True, slots=True)
class Query:
    """One page asked of a listing, validated."""

    state: str
    since: datetime | None = None
    until: datetime | None = None
    after: tuple[datetime, Any] | None = None
    limit: int = DEFAULT_LIMIT
    tenant: UUID | None = None
    owner: UUID | None = None
    bu: UUID | None = None
    key_prefix: str | None = None
    bound: tuple[datetime, Any] = (FLOOR, None)
    """Where the page starts: rows after it (before it, newest first), cursor and window
    combined."""
    end: datetime = CEILING
    """The window's other end: rows before it (from it on, newest first)."""

    def params(self) -> dict[str, str]:
        """The query as parameters again (without ``after``): the filter form, the next link."""
        out = {"state": self.state, "limit": str(self.limit)}
        if self.since is not None:
            out["from"] = self.since.isoformat()
        if self.until is not None:
            out["to"] = self.until.isoformat()
        for name in OPTIONAL_FILTERS:
            value = getattr(self, name)
            if value is not None:
                out[name] = str(value)
        return out


PageFn = Callable[[Any, Query], Awaitable[list[dict[str, Any]]]]
"""(connection, query) → up to ``query.limit`` rows in the listing's order."""
CountsFn = Callable[[Any, int], Awaitable[dict[str, int]]]
"""(connection, cap) → rows by state, each counted up to cap."""
DetailFn = Callable[[Any, Any], Awaitable[dict[str, Any] | None]]
"""(runtime, row id) → the row's detail (``row``, ``attempts``, ``last_error``, ``outbox``,
``lineage``), None when there is no such row."""


@dataclass(frozen=True)
class Listing:
    name: str
    """``<slice>/<listing>``, e.g. ``calendar/reminders`` (the URL and the CLI's argument)."""
    title: str
    table: str
    states: tuple[str, ...]
    """The states it lists by (the first is the default); one state per page."""
    time_column: str
    """The row's natural time: the window (``from``/``to``) and the order, with the id."""
    id_column: str
    id_kind: IdKind
    columns: tuple[str, ...]
    """What a page shows of each row (the JSON carries these)."""
    page: PageFn
    counts: CountsFn
    detail: DetailFn
    filters: tuple[str, ...] = ()
    """Of OPTIONAL_FILTERS, those it offers; each is served by an index (a value that matches
    nothing costs an index probe, never a scan of a state: the page is a public read)."""
    requires: tuple[tuple[str, str], ...] = ()
    """(filter, filter): the first is refused (400) unless the second is given too, when only
    the second has an index."""
    newest_first: bool = False
    about: str = ""
    """One line: what a row is, and where the states come from."""

    def __post_init__(self) -> None:
        if self.name.count("/") != 1 or not all(self.name.split("/")):
            raise ValueError(f"listing name {self.name!r} is not <slice>/<listing>")
        if not self.states:
            raise ValueError(f"listing {self.name}: no states")
        unknown = sorted(
            (set(self.filters) | {f for pair in self.requires for f in pair})
            - set(OPTIONAL_FILTERS)
        )
        if unknown:
            raise ValueError(f"listing {self.name}: unknown filters {unknown}")
        for column in (self.id_column, self.time_column):
            if column not in self.columns:
                raise ValueError(f"listing {self.name}: {column!r} is not one of its columns")

    @property
    def slice(self) -> str:
        return self.name.split("/")[0]

    def parse_id(self, value: str, param: str = "id") -> Any:
        return parse_id(self.id_kind, value, param)

    def query(self, params: Mapping[str, str]) -> Query:
        """The validated query of ``params`` (empty values are absent); FilterError names the
        parameter it refuses."""
        given = {k: v.strip() for k, v in params.items() if v is not None and v.strip() != ""}
        for name in given:
            if name in COMMON or name in IGNORED or name in self.filters:
                continue
            if name in OPTIONAL_FILTERS:
                offered = ", ".join(self.filters) or "none"
                raise FilterError(
                    name, f"not a filter of {self.name} (its optional filters: {offered})"
                )
            raise FilterError(name, "unknown parameter")
        state = given.get("state", self.states[0])
        if state not in self.states:
            raise FilterError("state", f"{state!r} is not one of {', '.join(self.states)}")
        since = parse_instant(given["from"], "from") if "from" in given else None
        until = parse_instant(given["to"], "to") if "to" in given else None
        if since is not None and until is not None and until <= since:
            raise FilterError("to", "must be later than from")
        after = decode_cursor(given["after"], self.id_kind) if "after" in given else None
        limit = parse_limit(given["limit"]) if "limit" in given else DEFAULT_LIMIT
        key_prefix = given.get("key_prefix")
        if key_prefix is not None and len(key_prefix) > MAX_KEY_PREFIX:
            raise FilterError("key_prefix", f"longer than {MAX_KEY_PREFIX} characters")
        if key_prefix is not None:
            if "\x00" in key_prefix:
                raise FilterError("key_prefix", "holds a NUL character")
            prefix_range(key_prefix)
        for name, needed in self.requires:
            if name in given and needed not in given:
                raise FilterError(
                    name,
                    f"only together with {needed}: no index serves {name} alone on "
                    f"{self.table} (a value matching nothing would read every row of a state)",
                )
        bound, end = keyset_bound(self, since, until, after)
        return Query(
            state=state,
            since=since,
            until=until,
            after=after,
            limit=limit,
            tenant=_uuid(given, "tenant"),
            owner=_uuid(given, "owner"),
            bu=_uuid(given, "bu"),
            key_prefix=key_prefix,
            bound=bound,
            end=end,
        )

    def cursor_of(self, row: Mapping[str, Any]) -> str:
        return encode_cursor(row[self.time_column], row[self.id_column])


def keyset_bound(
    listing: Listing,
    since: datetime | None,
    until: datetime | None,
    after: tuple[datetime, Any] | None,
) -> tuple[tuple[datetime, Any], datetime]:
    """The page's start as one (time, id) pair, and the window's other end: the cursor when it
    is inside the window, else the window's start. One bound, so that the index range starts
    there (a second lower bound beside a row comparison could start the scan at the first)."""
    lowest = MIN_ID[listing.id_kind]
    if listing.newest_first:
        start = ((until or CEILING), lowest)
        bound = min(after, start) if after is not None else start
        return bound, since or FLOOR
    start = ((since or FLOOR), lowest)
    bound = max(after, start) if after is not None else start
    return bound, until or CEILING


def parse_instant(value: str, param: str) -> datetime:
    """ISO-8601: a date (its midnight, UTC) or an instant (UTC unless it carries an offset)."""
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), time(), UTC)
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise FilterError(param, f"{value!r} is not an ISO-8601 date or instant") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    if not FLOOR < parsed < CEILING:
        raise FilterError(param, f"{value!r} is out of range")
    return parsed.astimezone(UTC)


def prefix_range(prefix: str) -> tuple[str, str]:
    """[prefix, past): every string that starts with ``prefix`` and no other, in code point
    order (PostgreSQL's collation "C" on UTF-8): ``past`` is the prefix with its last
    character the next one (dropping trailing U+10FFFF, skipping the surrogates).
    FilterError for a prefix with no such end (only U+10FFFF characters)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            following = 0xE000 if 0xD800 <= last + 1 <= 0xDFFF else last + 1
            return prefix, "".join(chars) + chr(following)
    raise FilterError("key_prefix", "must hold a character below U+10FFFF")


def parse_limit(value: str) -> int:
    try:
        limit = int(value)
    except ValueError:
        raise FilterError("limit", f"{value!r} is not a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise FilterError("limit", f"must be between 1 and {MAX_LIMIT}")
    return limit


def parse_id(kind: IdKind, value: str, param: str) -> Any:
    try:
        if kind == "uuid":
            return UUID(value)
        if kind == "int":
            number = int(value)
            if not -(2**63) < number < 2**63:
                raise ValueError(value)
            return number
    except ValueError:
        raise FilterError(param, f"{value!r} is not a {_ID_NAMES[kind]}") from None
    if not value or len(value) > MAX_KEY_PREFIX:
        raise FilterError(param, f"{value!r} is not an id")
    return value


_ID_NAMES = {"uuid": "UUID", "int": "whole number", "text": "text id"}


def _uuid(given: Mapping[str, str], name: str) -> UUID | None:
    return parse_id("uuid", given[name], name) if name in given else None


def encode_cursor(at: datetime, ident: Any) -> str:
    """The opaque ``after`` of a row: its (time, id), base64url JSON without padding."""
    raw = json.dumps([at.isoformat(), str(ident)], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(value: str, kind: IdKind) -> tuple[datetime, Any]:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        at, ident = json.loads(raw)
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None or not isinstance(ident, str):
            raise ValueError(value)
        return parsed, parse_id(kind, ident, "after")
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise FilterError("after", "not a cursor of this listing (take it from a page)") from None


def plain(value: Any) -> Any:
    """JSON-able: ids as text, instants and dates in ISO-8601, nested values likewise."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value

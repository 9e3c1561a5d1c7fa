"""Hypothesis strategies for the input contracts: valid wire messages, hostile values, mutations.

Everything here produces *wire* data (PascalCase JSON as other teams' producers send it),
never models: the code under test must do the parsing.

- ``VALID_INPUTS`` maps every consumed topic to a strategy of valid messages. A new input
  contract needs one entry here (the unit tier fails until it has one).
- ``mutated`` turns a valid message into a hostile one (wrong types, missing and extra
  fields, huge strings, tz folder names, extreme instants and numbers, unknown
  ContractVersion), ``raw_inputs`` adds random bytes and random JSON documents.
- ``calendar_history`` builds, for the calendar agent, a mix of valid states (several
  Versions per EventId, replays, out-of-order), records that must be dead-lettered, and a
  split into consumer batches.
"""

from __future__ import annotations

import itertools
import json
import string
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from streams.contracts import (
    BUSINESS_UNITS,
    CALENDAR_EVENTS,
    PERSON_DOCUMENTS,
    REMINDER_SETTINGS,
    REPORT_SUBSCRIPTIONS,
    SOURCE_EVENTS,
    TopicContract,
)
from streams.slices import catalogue

Wire = dict[str, Any]

INPUT_CONTRACTS: tuple[TopicContract[Any], ...] = tuple(
    c for c in catalogue() if c.direction == "in"
)

# Every zone key of the tz database the service runs with (sorted: reproducible examples).
ZONES: tuple[str, ...] = tuple(sorted(zoneinfo.available_timezones()))

# Strings that must never be accepted as a TimeZone: tzdata folders, files that are not
# zones, path tricks, NUL, over-long names, case and whitespace variants.
TZ_FOLDERS: tuple[str, ...] = (
    "America",
    "Etc",
    "Europe",
    "Asia",
    "Antarctica",
    "America/Argentina",
    "America/Indiana",
    "US",
    "posix",
    "right",
    "__pycache__",
)
TZ_NOT_ZONES: tuple[str, ...] = (
    *TZ_FOLDERS,
    "../etc/passwd",
    "../../../../../../etc/passwd",
    "/etc/passwd",
    "/etc/localtime",
    "/usr/share/zoneinfo/UTC",
    "Europe/Moscow\x00",
    "\x00",
    "UTC\x00../../etc/passwd",
    "A" * 300,
    "Europe/" + "x" * 300,
    "America/" * 40,
    "",
    " ",
    "Europe/Moscow ",
    " UTC",
    "europe/moscow",
    ".",
    "..",
    "Etc/..",
    "Europe/../Europe/Moscow",
    "Europe//Moscow",
    "Europe\\Moscow",
    "UTC/",
    "Europe/Moscow/",
    "~",
    "tzdata.zi",
    "zone.tab",
    "zone1970.tab",
    "iso3166.tab",
    "leapseconds",
    "__init__.py",
    "zoneinfo",
    "Mars/Olympus",
)
# Alternative copies in the tz database ("posix/..", "right/..": leap-second zones); a
# service that only accepts canonical IANA keys refuses them, one that loads them must
# at least not crash.
TZ_ODD: tuple[str, ...] = ("right/UTC", "posix/Europe/Moscow", "posixrules", "Factory", "EST5EDT")

INSTANT_EXTREMES: tuple[Any, ...] = (
    "0001-01-01T00:00:00+00:00",
    "0001-01-01T00:00:00+23:59",
    "0001-01-01T00:00:00-23:59",
    "0001-01-01T00:30:00+00:59",
    "9999-12-31T23:59:59+00:00",
    "9999-12-31T23:59:59.999999-23:59",
    "9999-12-31T23:59:59.999999+23:59",
    "2026-12-01T09:00:00",  # naive
    "2026-12-01T09:00:00.123456",  # naive
    "2026-12-01",
    "2026-12-01T09:00:00+24:00",
    "2026-12-01T09:00:00+23:59",
    "2026-12-01T09:00:00-23:59",
    "2026-12-01T09:00:00+00:00:30",
    "2026-02-30T09:00:00+00:00",
    "2026-12-01T25:00:00+00:00",
    "2026-12-01T09:00:00.1234567890123+00:00",
    "0000-01-01T00:00:00+00:00",
    "10000-01-01T00:00:00+00:00",
    "-0001-01-01T00:00:00+00:00",
    "1899-12-31T23:59:59+00:00",
    "9000-12-31T23:59:59+00:00",
    "T",
    "now",
    "",
    0,
    -1,
    2**63,
    -(2**63),
    1e308,
    -1e308,
    253402300800,
    "253402300800",
    "-62135596800",
)
NUMBER_EXTREMES: tuple[Any, ...] = (
    2**63,
    2**63 - 1,
    2**64,
    -(2**63) - 1,
    -(2**63),
    -1,
    0,
    1.5,
    -0.0,
    1e308,
    5e-324,
    10**40,
    float("nan"),
    float("inf"),
    float("-inf"),
    "NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "inf",
    "1e400",
    "0x10",
    "1_000",
    " 1",
    "1 ",
    "\u0661",  # ARABIC-INDIC DIGIT ONE
    "9" * 5000,
    True,
    False,
)
HUGE_STRINGS: tuple[str, ...] = ("x" * 65, "x" * 10_000, "é" * 50_000, "\x00" * 1000)
STRUCTURAL: tuple[Any, ...] = (None, True, False, [], {}, "", [None] * 100, {"": {"": {}}})

# A value no error reason may ever echo back (reasons reach logs and DLQ headers: no PII).
PII_MARKER = "Zq9PiiMarker"


def json_values(max_leaves: int = 20, *, finite: bool = False) -> st.SearchStrategy[Any]:
    """Any JSON document (NaN/Infinity included unless ``finite``)."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=not finite, allow_infinity=not finite)
        | st.text(max_size=40)
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=5)
            | st.dictionaries(st.text(max_size=12), children, max_size=5)
        ),
        max_leaves=max_leaves,
    )


def hostile_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(TZ_NOT_ZONES + TZ_ODD),
        st.sampled_from(INSTANT_EXTREMES),
        st.sampled_from(NUMBER_EXTREMES),
        st.sampled_from(HUGE_STRINGS),
        st.sampled_from(STRUCTURAL),
        st.text(max_size=40).map(lambda s: PII_MARKER + s),
        json_values(8),
    )


# --- valid messages -------------------------------------------------------------------

_text_chars = st.characters(codec="utf-8", exclude_characters="\x00")


def names(min_size: int = 1, max_size: int = 64) -> st.SearchStrategy[str]:
    """Free text a producer may send (any Unicode but NUL, which PostgreSQL text refuses)."""
    return st.text(_text_chars, min_size=min_size, max_size=max_size)


def offsets() -> st.SearchStrategy[timezone]:
    return st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))


def instants(
    min_value: datetime = datetime(1970, 1, 1), max_value: datetime = datetime(2200, 1, 1)
) -> st.SearchStrategy[datetime]:
    """Aware datetimes with any whole-minute UTC offset up to ±23:59."""
    return st.datetimes(min_value=min_value, max_value=max_value, timezones=offsets())


def iso(value: datetime | date | time) -> str:
    return value.isoformat()


def versions() -> st.SearchStrategy[int]:
    return st.integers(0, 2**63 - 1)


uuids = st.uuids().map(str)


@st.composite
def calendar_events(
    draw: st.DrawFn,
    *,
    start: st.SearchStrategy[datetime] | None = None,
    occurred: st.SearchStrategy[datetime] | None = None,
) -> Wire:
    return {
        "ContractVersion": 1,
        "EventId": draw(uuids),
        "TenantId": draw(uuids),
        "OwnerUserId": draw(uuids),
        "ClientUserId": draw(st.none() | uuids),
        "Kind": draw(names(1, 64)),
        "StartAt": iso(draw(start or instants())),
        "TimeZone": draw(st.sampled_from(ZONES)),
        "Status": draw(st.sampled_from(["Planned", "InProgress", "Completed", "Cancelled"])),
        "ReminderOffsetsMinutes": draw(st.lists(st.integers(0, 40_320), max_size=32)),
        "AppointmentId": draw(st.none() | uuids),
        "Version": draw(versions()),
        "OccurredAt": iso(draw(occurred or instants())),
    }


@st.composite
def person_documents(draw: st.DrawFn) -> Wire:
    return {
        "ContractVersion": 1,
        "DocumentId": draw(uuids),
        "OwnerUserId": draw(uuids),
        "PersonId": draw(uuids),
        "Type": draw(names(1, 32)),
        "NumberMask": draw(st.none() | names(0, 64)),
        "ExpiresAt": draw(st.none() | st.dates().map(iso)),
        "Status": draw(st.sampled_from(["Active", "Archived"])),
        "IsDeleted": draw(st.booleans()),
        "Version": draw(versions()),
        "OccurredAt": iso(draw(instants())),
        # Opaque, never stored or decoded by this service; producers send it anyway.
        "PayloadCipher": draw(st.text(string.ascii_letters + string.digits + "+/=", max_size=64)),
    }


@st.composite
def source_events(draw: st.DrawFn) -> Wire:
    return {
        "ContractVersion": 1,
        "SourceType": draw(names(1, 64)),
        "SourceGuid": draw(uuids),
        "BusinessUnitId": draw(uuids),
        "Version": draw(versions()),
        "OccurredAt": iso(draw(instants())),
        "IsActive": draw(st.booleans()),
        "Attributes": draw(st.dictionaries(names(0, 20), json_values(10, finite=True), max_size=6)),
    }


@st.composite
def thresholds(draw: st.DrawFn) -> Wire:
    return {
        "MetricKey": draw(names(1, 40)),
        "Value": draw(st.floats(allow_nan=False, allow_infinity=False)),
        "Comparator": draw(
            st.sampled_from(["GreaterThanOrEqual", "GreaterThan", "LessThanOrEqual", "LessThan"])
        ),
        "FiringPolicy": draw(
            st.sampled_from(["OncePerSource", "OncePerThreshold", "OncePerDay", "FalseToTrue"])
        ),
    }


@st.composite
def reminder_settings(draw: st.DrawFn) -> Wire:
    trigger = draw(
        st.sampled_from(
            ["DateBased", "ThresholdCondition", "Recurring", "ScheduledRun", "ManualRun"]
        )
    )
    offsets_days = st.lists(st.integers(-3650, 3650), max_size=8)
    return {
        "ContractVersion": 1,
        "SettingGuid": draw(uuids),
        "BusinessUnitId": draw(uuids),
        "SourceType": draw(names(1, 64)),
        "TriggerType": trigger,
        "TriggerKey": draw(names(1, 128)),
        "OffsetsDays": draw(
            st.lists(st.integers(-3650, 3650), min_size=1, max_size=8)
            if trigger == "DateBased"
            else offsets_days
        ),
        "SendTimeLocal": iso(draw(st.times())),
        "Threshold": draw(thresholds() if trigger == "ThresholdCondition" else st.none()),
        "Active": draw(st.booleans()),
        "Version": draw(versions()),
    }


@st.composite
def business_units(draw: st.DrawFn) -> Wire:
    return {
        "ContractVersion": 1,
        "BusinessUnitId": draw(uuids),
        "TimeZoneId": draw(st.sampled_from(ZONES)),
        "Version": draw(versions()),
    }


@st.composite
def report_subscriptions(draw: st.DrawFn) -> Wire:
    manual = draw(st.none() | uuids)
    schedule = draw(st.sampled_from(["cron", "period", "both", "none"]))
    if manual is None:
        schedule = draw(st.sampled_from(["cron", "period"]))
    cron = "0 9 * * 1" if schedule in ("cron", "both") else None
    period = draw(st.sampled_from(["Daily", "Weekly", "Monthly"])) if schedule != "cron" else None
    return {
        "ContractVersion": 1,
        "SubscriptionGuid": draw(uuids),
        "BusinessUnitId": draw(uuids),
        "Cron": cron,
        "Period": period if schedule in ("period", "both") else None,
        "Active": draw(st.booleans()),
        "Version": draw(versions()),
        "ManualRunGuid": manual,
    }


# One line per consumed topic: the valid wire messages of that contract.
VALID_INPUTS: dict[str, Callable[[], st.SearchStrategy[Wire]]] = {
    CALENDAR_EVENTS.name: calendar_events,
    PERSON_DOCUMENTS.name: person_documents,
    SOURCE_EVENTS.name: source_events,
    REMINDER_SETTINGS.name: reminder_settings,
    BUSINESS_UNITS.name: business_units,
    REPORT_SUBSCRIPTIONS.name: report_subscriptions,
}


# --- hostile messages -----------------------------------------------------------------


def encode(obj: Any) -> bytes:
    """JSON as a careless producer may write it: NaN/Infinity literals allowed."""
    return json.dumps(obj, allow_nan=True).encode()


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[Wire]) -> Wire:
    """A valid message with 1-4 hostile edits (the result may still happen to be valid)."""
    msg: Wire = dict(draw(valid))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(
            st.sampled_from(
                ["drop", "replace", "replace", "replace", "nested", "extra", "version", "rename"]
            )
        )
        keys = sorted(msg)
        if op == "extra" or not keys:
            extra_key = draw(st.text(max_size=12) | st.sampled_from(["payload", "Version "]))
            msg[extra_key] = draw(json_values(8) | st.sampled_from(HUGE_STRINGS))
            continue
        key = draw(st.sampled_from(keys))
        nested = sorted(k for k in keys if isinstance(msg[k], dict))
        if op == "nested" and nested:
            # Inside an object field (Threshold, Attributes): edit or add one member.
            key = draw(st.sampled_from(nested))
            inner = dict(msg[key])
            member = draw(st.sampled_from(sorted(inner)) | st.text(max_size=8)) if inner else "x"
            inner[member] = draw(hostile_values())
            msg[key] = inner
        elif op == "drop":
            del msg[key]
        elif op == "replace":
            msg[key] = draw(hostile_values())
        elif op == "version":
            msg["ContractVersion"] = draw(
                st.sampled_from([0, 2, -1, 2**63, "1", "v1", None, 1.5, [], {}, "2"])
                | st.integers().filter(lambda v: v != 1)
            )
        else:  # rename: snake_case, lower case or upper case instead of PascalCase
            new = draw(st.sampled_from([_snake(key), key.lower(), key.upper()]))
            msg[new] = msg.pop(key)
    return msg


def raw_inputs(valid: st.SearchStrategy[Wire]) -> st.SearchStrategy[bytes | None]:
    """Whatever can sit in a record's value: null, random bytes, any JSON, mutated messages."""
    return st.one_of(
        st.none(),
        st.binary(max_size=512),
        st.sampled_from([b"", b" ", b"{", b"null", b"[]", b"0", b'"x"', b"\xef\xbb\xbf{}"]),
        json_values().map(encode),
        mutated(valid).map(encode),
        # Invalid UTF-8 inside an otherwise well-formed document (lone surrogates).
        mutated(valid).map(
            lambda m: json.dumps(
                {**m, "Kind": "\ud800"}, ensure_ascii=False, allow_nan=True
            ).encode("utf-8", "surrogatepass")
        ),
        # A valid message cut short, or followed by garbage.
        st.tuples(valid.map(encode), st.integers(0, 400)).map(lambda t: t[0][: t[1]]),
        valid.map(lambda m: encode(m) + b" trailing"),
    )


# --- the calendar agent: histories of records for one consumer ------------------------

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
VALID = "valid"
HOSTILE = "hostile"


@dataclass(frozen=True)
class Record:
    """One input record. ``state`` is the wire message of a valid record, else None."""

    key: bytes | None
    value: bytes | None
    kind: str  # VALID or HOSTILE (must end in the DLQ)
    state: Wire | None = None
    why: str = ""  # for hostile records: what makes them hostile (for failure messages)


@dataclass
class History:
    records: list[Record]
    batches: list[list[int]] = field(default_factory=list)  # indexes into records

    def newest(self) -> dict[str, Wire]:
        """EventId -> the state the projection must end with: the first record of the
        highest Version (a later equal Version is a replay and changes nothing)."""
        best: dict[str, Wire] = {}
        for r in self.records:
            if r.kind == VALID and r.state is not None:
                seen = best.get(r.state["EventId"])
                if seen is None or r.state["Version"] > seen["Version"]:
                    best[r.state["EventId"]] = r.state
        return best


def _sane_instants() -> st.SearchStrategy[datetime]:
    # Around T0, whole minutes, so reminder due times fall on both sides of OccurredAt.
    return st.integers(-3 * 24 * 60, 10 * 24 * 60).map(lambda m: T0 + timedelta(minutes=m))


@st.composite
def _calendar_state(
    draw: st.DrawFn, base: Wire, version: int, occurred_at: datetime, prev: Wire | None
) -> Wire:
    occurred = iso(occurred_at.astimezone(draw(offsets())))
    if prev is not None and draw(st.integers(0, 3)) == 0:
        # Same fingerprint as the previous Version: only Version/OccurredAt change, and
        # StartAt may be written with another offset (the same instant).
        start = datetime.fromisoformat(prev["StartAt"]).astimezone(draw(offsets()))
        if not 1900 <= start.year <= 9000:
            # The contract checks the year as written (not of the UTC instant): keep the
            # edge instants written as they were, so the state stays valid.
            start = datetime.fromisoformat(prev["StartAt"])
        return {**prev, "Version": version, "OccurredAt": occurred, "StartAt": iso(start)}
    start = draw(_sane_instants()).astimezone(draw(offsets()))
    if draw(st.integers(0, 9)) == 0:
        # The edges of what the contract accepts (years 1900..9000), written with ±23:59
        # offsets: local and UTC years both inside; due times fall outside.
        plus, minus = (
            timezone(timedelta(hours=23, minutes=59)),
            timezone(-timedelta(hours=23, minutes=59)),
        )
        start = draw(
            st.sampled_from(
                [
                    datetime(1900, 1, 1, 23, 59, tzinfo=plus),  # 1900-01-01T00:00Z
                    datetime(9000, 12, 31, 0, 0, tzinfo=minus),  # 9000-12-31T23:59Z
                ]
            )
        )
    return {
        **base,
        "Kind": draw(st.sampled_from(["Meeting", "Call", "Visit", "Ünïcødé ✓"])),
        "StartAt": iso(start),
        "TimeZone": draw(
            st.sampled_from(["Europe/Moscow", "UTC", "America/New_York", "Asia/Kathmandu"])
        ),
        "Status": draw(
            st.sampled_from(["Planned", "Planned", "InProgress", "Completed", "Cancelled"])
        ),
        "ReminderOffsetsMinutes": draw(
            st.lists(st.sampled_from([0, 5, 15, 60, 120, 1440, 40_320]), max_size=4)
        ),
        "ClientUserId": draw(st.none() | uuids),
        "Version": version,
        "OccurredAt": occurred,
    }


# Edits that make a calendar message invalid whatever the rest holds.
def _hostile_calendar(state: Wire, version: int) -> st.SearchStrategy[tuple[bytes | None, str]]:
    bad: Wire = {**state, "Version": version}

    def edit(why: str, **changes: Any) -> tuple[bytes | None, str]:
        return encode({**bad, **changes}), why

    def drop(name: str) -> tuple[bytes | None, str]:
        return encode({k: v for k, v in bad.items() if k != name}), f"no {name}"

    return st.one_of(
        st.sampled_from(TZ_NOT_ZONES).map(lambda tz: edit(f"TimeZone {tz[:20]!r}", TimeZone=tz)),
        st.sampled_from(
            [
                "EventId",
                "TenantId",
                "OwnerUserId",
                "Kind",
                "StartAt",
                "TimeZone",
                "Status",
                "Version",
                "OccurredAt",
            ]
        ).map(drop),
        st.sampled_from(
            [
                "2026-12-01T09:00:00",
                "0001-01-01T00:00:00+23:59",
                "0000-01-01T00:00:00+00:00",
                "2026-02-30T09:00:00+00:00",
                "now",
            ]
        ).map(lambda v: edit(f"StartAt {v!r}", StartAt=v)),
        st.sampled_from([2**63, -1, "NaN", 1.5, None, [], "1e400"]).map(
            lambda v: edit(f"Version {v!r}", Version=v)
        ),
        st.sampled_from([0, 2, "2", None, "v1"]).map(
            lambda v: edit(f"ContractVersion {v!r}", ContractVersion=v)
        ),
        st.sampled_from(["Exploded", "planned", "", 1, None]).map(
            lambda v: edit(f"Status {v!r}", Status=v)
        ),
        st.sampled_from([[-5], [40_321], [2**63], list(range(33)), "60", [None], [1.5]]).map(
            lambda v: edit("ReminderOffsetsMinutes", ReminderOffsetsMinutes=v)
        ),
        st.sampled_from(["", "x" * 65, "x" * 100_000, 7, None]).map(lambda v: edit("Kind", Kind=v)),
        # Decodes as far as the schema goes; PostgreSQL text cannot hold NUL.
        st.just(edit("Kind with NUL", Kind="Meet\x00ing")),
        st.sampled_from(["not-a-uuid", "", 5, None]).map(lambda v: edit("EventId", EventId=v)),
        st.binary(max_size=64).map(lambda b: (b"\xff" + b, "not UTF-8")),
        st.sampled_from([b"", b"{", b"null", b"[]", b"1", b'"x"', b"{}"]).map(
            lambda b: (b, f"value {b!r}")
        ),
        st.just((None, "null value")),
        # A duplicated key: JSON parsers keep the last one, here a wrong type.
        st.just((encode(bad)[:-1] + b', "Version": "x"}', "duplicate Version key")),
    )


@st.composite
def calendar_history(
    draw: st.DrawFn, *, max_events: int = 4, max_versions: int = 6, max_hostile: int = 10
) -> History:
    """Valid states of a few events (Versions shuffled, replayed), hostile records keyed by
    the same events (with Versions above the newest valid one, so applying any of them would
    show), and a split of the whole into consumer batches."""
    records: list[Record] = []
    top: dict[str, int] = {}
    states: list[Wire] = []
    for _ in range(draw(st.integers(1, max_events))):
        base: Wire = {
            "ContractVersion": 1,
            "EventId": draw(uuids),
            "TenantId": draw(uuids),
            "OwnerUserId": draw(uuids),
            "ClientUserId": None,
            "AppointmentId": draw(st.none() | uuids),
        }
        # Versions close together (so they collide, repeat and reorder), near 0 or near
        # the largest a bigint holds.
        floor = draw(st.sampled_from([0, 0, 0, 2**63 - 64]))
        chosen = sorted(
            floor + v for v in draw(st.sets(st.integers(0, 40), min_size=1, max_size=max_versions))
        )
        # A later Version happened later (or at the same time): OccurredAt follows Version.
        moments = sorted(
            draw(st.lists(_sane_instants(), min_size=len(chosen), max_size=len(chosen)))
        )
        prev: Wire | None = None
        for v, occurred_at in zip(chosen, moments, strict=True):
            prev = draw(_calendar_state(base, v, occurred_at, prev))
            states.append(prev)
            key = prev["EventId"].encode()
            for _copy in range(draw(st.integers(1, 3))):  # 2nd and 3rd copies are replays
                records.append(Record(key, encode(prev), VALID, prev))
        top[str(base["EventId"])] = chosen[-1]
    if draw(st.booleans()):
        # A valid message with unknown extra fields (additive change) is still valid.
        s = draw(st.sampled_from(states))
        extra = {**s, "Unknown": draw(json_values(5)), "Payload": "x" * 2000}
        records.append(Record(s["EventId"].encode(), encode(extra), VALID, s))
    for _ in range(draw(st.integers(0, max_hostile))):
        s = draw(st.sampled_from(states))
        value, why = draw(_hostile_calendar(s, top[s["EventId"]] + draw(st.integers(1, 3))))
        key = draw(st.sampled_from([s["EventId"].encode(), None, b"\xff\xfe", b""]))
        records.append(Record(key, value, HOSTILE, None, why))
    order = draw(st.permutations(range(len(records))))
    shuffled = [records[i] for i in order]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(shuffled) - 1)), max_size=8)))
    bounds = [0, *[c for c in cuts if c < len(shuffled)], len(shuffled)]
    batches = [list(range(a, b)) for a, b in itertools.pairwise(bounds) if b > a]
    return History(shuffled, batches)

"""The console's listing rules without a database: filter values, the opaque cursor, the keyset
bound, and the listings every slice declares."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.console import rows
from streams.console.listing import (
    CEILING,
    FLOOR,
    MIN_ID,
    OPTIONAL_FILTERS,
    FilterError,
    Listing,
    decode_cursor,
    encode_cursor,
    parse_instant,
    plain,
    prefix_range,
)

T = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


async def _none(*_: Any) -> Any:
    return None


def listing(**overrides: Any) -> Listing:
    fields: dict[str, Any] = {
        "name": "demo/things",
        "title": "Things",
        "table": "demo.things",
        "states": ("Open", "Closed"),
        "time_column": "at",
        "id_column": "id",
        "id_kind": "uuid",
        "columns": ("id", "at"),
        "page": _none,
        "counts": _none,
        "detail": _none,
        "filters": ("owner",),
    }
    return Listing(**(fields | overrides))


def test_defaults_first_state_whole_window_and_a_page_of_50() -> None:
    q = listing().query({})
    assert (q.state, q.since, q.until, q.after, q.limit) == ("Open", None, None, None, 50)
    assert q.bound == (FLOOR, MIN_ID["uuid"])
    assert q.end == CEILING


def test_empty_values_are_absent_and_values_parse() -> None:
    owner = uuid4()
    q = listing().query(
        {"state": "Closed", "from": "2026-12-01", "to": "2026-12-02T10:00:00+01:00",
         "owner": str(owner), "limit": "7", "format": "json", "key_prefix": " "}
    )  # fmt: skip
    assert (q.state, q.owner, q.limit) == ("Closed", owner, 7)
    assert q.since == T - timedelta(hours=8)
    assert q.until == datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    assert q.bound == (q.since, MIN_ID["uuid"])
    assert q.end == q.until


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"state": "open"}, "state"),
        ({"from": "2026-13-01"}, "from"),
        ({"to": "soon"}, "to"),
        ({"from": "2026-12-02", "to": "2026-12-02"}, "to"),
        ({"owner": "42"}, "owner"),
        ({"tenant": str(uuid4())}, "tenant"),  # offered by other listings, not this one
        ({"limit": "501"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"after": "e30"}, "after"),  # "{}"
        ({"after": encode_cursor(T, 17)}, "after"),  # an int id in a uuid listing
        ({"sort": "id"}, "sort"),
    ],
)
def test_bad_values_name_their_parameter(params: dict[str, str], param: str) -> None:
    with pytest.raises(FilterError) as refused:
        listing().query(params)
    assert refused.value.param == param
    assert str(refused.value).startswith(f"{param}: ")


def test_naive_instants_are_utc() -> None:
    assert parse_instant("2026-12-01T08:00:00", "from") == T
    assert parse_instant("2026-12-01T09:00:00+01:00", "from") == T


@given(
    at=st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(9000, 1, 1), timezones=st.just(UTC)
    ),
    ident=st.one_of(st.uuids(), st.integers(-(2**62), 2**62), st.text(min_size=1, max_size=40)),
)
def test_a_cursor_decodes_to_what_it_encoded(at: datetime, ident: Any) -> None:
    kind = "uuid" if isinstance(ident, UUID) else "int" if isinstance(ident, int) else "text"
    assert decode_cursor(encode_cursor(at, ident), kind) == (at, ident)


def test_the_bound_is_the_cursor_inside_the_window_else_the_window_start() -> None:
    things = listing()
    inside = encode_cursor(T + timedelta(hours=1), UUID(int=5))
    q = things.query({"from": T.isoformat(), "after": inside})
    assert q.bound == (T + timedelta(hours=1), UUID(int=5))
    # A cursor from before the window (the window was changed): the window's start wins.
    q = things.query({"from": (T + timedelta(days=1)).isoformat(), "after": inside})
    assert q.bound == (T + timedelta(days=1), MIN_ID["uuid"])


def test_newest_first_bounds_from_the_window_end() -> None:
    runs = listing(newest_first=True, id_kind="text")
    q = runs.query({"from": T.isoformat(), "to": (T + timedelta(days=3)).isoformat()})
    assert (q.bound, q.end) == ((T + timedelta(days=3), ""), T)
    after = encode_cursor(T + timedelta(days=1), "run-1")
    assert runs.query({"after": after}).bound == (T + timedelta(days=1), "run-1")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "things"}, "not <slice>/<listing>"),
        ({"states": ()}, "no states"),
        ({"filters": ("colour",)}, "unknown filters"),
        ({"columns": ("id",)}, "'at' is not one of its columns"),
    ],
)
def test_a_malformed_declaration_fails_when_made(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        listing(**overrides)


def test_every_slice_declares_its_listings_with_the_issue_s_rows() -> None:
    declared = {x.name: x for x in rows.declared()}
    assert set(declared) == {
        "calendar/reminders",
        "profile/expiry-markers",
        "profile/expiry-runs",
        "automation/scheduler",
    }
    assert declared["calendar/reminders"].states == ("Pending", "Retrying", "Sent", "Skipped")
    assert "OnHold" in declared["automation/scheduler"].states
    for x in declared.values():
        assert set(x.filters) <= set(OPTIONAL_FILTERS)
    assert rows.find("automation/scheduler").filters == ("bu", "key_prefix")
    with pytest.raises(rows.UnknownListing, match="calendar/reminders"):
        rows.find("calendar/nope")


def test_plain_values_are_json_able() -> None:
    ident = uuid4()
    assert plain({"id": ident, "at": T, "n": [1, T.date()]}) == {
        "id": str(ident),
        "at": T.isoformat(),
        "n": [1, "2026-12-01"],
    }


@given(st.text(min_size=1, max_size=6), st.text(max_size=6))
def test_a_prefix_range_holds_exactly_the_strings_that_start_with_it(
    prefix: str, tail: str
) -> None:
    """In code point order (PostgreSQL's "C" on UTF-8), which Python's str order is."""
    if all(c == "\U0010ffff" for c in prefix):
        with pytest.raises(FilterError):
            prefix_range(prefix)
        return
    first, past = prefix_range(prefix)
    assert first <= prefix + tail < past
    other = tail + prefix
    assert (first <= other < past) == other.startswith(prefix)
    past.encode()  # never a lone surrogate: PostgreSQL takes it


def test_key_prefix_is_checked_and_tenant_needs_an_owner() -> None:
    scheduler = rows.find("automation/scheduler")
    for bad in ("a\x00b", "\U0010ffff"):
        with pytest.raises(FilterError) as refused:
            scheduler.query({"key_prefix": bad})
        assert refused.value.param == "key_prefix"
    reminders = rows.find("calendar/reminders")
    with pytest.raises(FilterError, match="only together with owner") as refused:
        reminders.query({"tenant": str(uuid4())})
    assert refused.value.param == "tenant"
    both = reminders.query({"tenant": str(uuid4()), "owner": str(uuid4())})
    assert both.tenant is not None and both.owner is not None


def test_every_offered_filter_is_declared_served() -> None:
    """A listing's filters are those its statements serve with an index (docs/console.md):
    adding one means adding its index and statement, and this list."""
    served = {
        "calendar/reminders": (("tenant", "owner"), (("tenant", "owner"),)),
        "automation/scheduler": (("bu", "key_prefix"), ()),
        "profile/expiry-markers": (("owner",), ()),
        "profile/expiry-runs": ((), ()),
    }
    assert {x.name: (x.filters, x.requires) for x in rows.declared()} == served

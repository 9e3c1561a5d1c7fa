"""Pure document expiry rules: DaysLeft by UTC date, crossed, t*, window, thresholds, cache values."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.profile import (
    DEFAULT_THRESHOLDS,
    MAX_THRESHOLD_DAYS,
    RETENTION_DAYS,
    crossed,
    days_left,
    decide,
    decode_marks,
    encode_marks,
    normalize_thresholds,
    parse_thresholds,
    prune_before,
    scan_window,
    settled_by,
    t_star,
    utc_date,
)
from streams.settings import ConfigError, Settings
from streams.slices.profile.settings import DocumentExpirySettings

TODAY = date(2026, 6, 10)
thresholds_st = st.lists(st.integers(0, 400), min_size=1, max_size=8)


def test_days_left_counts_utc_dates_not_hours() -> None:
    # 23:30 at UTC+3 on the 11th is still the 10th in UTC: DaysLeft counts from the 10th.
    late = datetime(2026, 6, 11, 1, 30, tzinfo=timezone(timedelta(hours=3)))
    assert utc_date(late) == TODAY
    assert days_left(date(2026, 6, 17), utc_date(late)) == 7
    assert days_left(date(2026, 6, 7), TODAY) == -3
    with pytest.raises(ValueError, match="timezone-aware"):
        utc_date(datetime(2026, 6, 10, 12, 0))


def test_crossed_and_t_star_as_in_the_seed() -> None:
    assert crossed(7, DEFAULT_THRESHOLDS) == {30, 7}
    assert crossed(5, DEFAULT_THRESHOLDS) == {30, 7}
    assert crossed(0, DEFAULT_THRESHOLDS) == {30, 7, 1, 0}
    assert crossed(-4, DEFAULT_THRESHOLDS) == {30, 7, 1, 0}
    assert crossed(31, DEFAULT_THRESHOLDS) == set()
    assert t_star(frozenset({30, 7}), set()) == 7
    assert t_star(frozenset({30, 7}), {7}) == 30  # a threshold added later still fires
    assert t_star(frozenset({30, 7}), {30, 7}) is None


def test_decide_marks_every_crossed_threshold_and_notifies_only_t_star() -> None:
    doc = uuid.uuid4()
    d = decide(doc, TODAY + timedelta(days=5), TODAY, DEFAULT_THRESHOLDS, set())
    assert (d.days_left, d.to_mark, d.notify) == (5, (30, 7), 7)
    again = decide(doc, TODAY + timedelta(days=5), TODAY, DEFAULT_THRESHOLDS, {30, 7})
    assert (again.to_mark, again.notify) == ((), None)


@given(thresholds_st, st.integers(-200, 500), st.sets(st.integers(0, 400)))
def test_t_star_is_the_most_urgent_unmarked_crossed_threshold(
    raw: list[int], left: int, marked: set[int]
) -> None:
    thresholds = normalize_thresholds(raw)
    hit = crossed(left, thresholds)
    star = t_star(hit, marked)
    assert hit == {t for t in thresholds if left <= t}
    if star is None:
        assert hit <= marked
    else:
        assert star in hit and star not in marked
        assert all(t > star for t in hit - marked - {star})
    d = decide(uuid.uuid4(), TODAY + timedelta(days=left), TODAY, thresholds, marked)
    assert set(d.to_mark) == hit - marked and d.notify == star
    # Marking what was decided leaves nothing to do: a second run is a no-op.
    assert (
        decide(
            d.document_id, TODAY + timedelta(days=left), TODAY, thresholds, marked | set(d.to_mark)
        ).notify
        is None
    )


@given(thresholds_st, st.integers(-200, 500), st.integers(0, 30))
def test_crossed_only_grows_as_days_pass(raw: list[int], left: int, later: int) -> None:
    thresholds = normalize_thresholds(raw)
    assert crossed(left, thresholds) <= crossed(left - later, thresholds)


@given(thresholds_st)
def test_normalized_thresholds_are_distinct_descending_and_stable(raw: list[int]) -> None:
    norm = normalize_thresholds(raw)
    assert list(norm) == sorted(set(raw), reverse=True)
    assert normalize_thresholds(norm) == norm
    assert parse_thresholds(",".join(map(str, raw))) == norm
    assert parse_thresholds(str(raw)) == norm


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "whole number"),
        ("30,-1", "between 0"),
        ("30,,7", "whole number"),
        ("7.5", "whole number"),
        ("[]", "at least one"),
        ("[30, true]", "whole number"),
        ('{"a": 1}', "whole number"),
        (f"{MAX_THRESHOLD_DAYS + 1}", "between 0"),
    ],
)
def test_bad_thresholds_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_thresholds(text)


def test_settings_normalize_thresholds_and_a_bad_value_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from streams.settings import load_settings

    monkeypatch.setenv("TIMER_DOCUMENT_EXPIRY_THRESHOLDS_DAYS", "0, 7,30,7")
    assert load_settings().of(DocumentExpirySettings).thresholds == (30, 7, 0)
    assert Settings().of(DocumentExpirySettings).thresholds == (30, 7, 0)
    for bad, setting in (
        ("30,-7", "TIMER_DOCUMENT_EXPIRY_THRESHOLDS_DAYS"),
        ("", "TIMER_DOCUMENT_EXPIRY_THRESHOLDS_DAYS"),
    ):
        monkeypatch.setenv("TIMER_DOCUMENT_EXPIRY_THRESHOLDS_DAYS", bad)
        with pytest.raises(ConfigError, match=setting):
            load_settings()
    monkeypatch.setenv("TIMER_DOCUMENT_EXPIRY_THRESHOLDS_DAYS", "30")
    monkeypatch.setenv("TIMER_DOCUMENT_EXPIRY_BATCH_SIZE", "0")
    with pytest.raises(ConfigError, match="TIMER_DOCUMENT_EXPIRY_BATCH_SIZE"):
        load_settings()


def test_window_runs_from_the_prune_horizon_to_the_largest_threshold() -> None:
    w = scan_window(TODAY, (30, 7, 1, 0))
    assert w.hi == TODAY + timedelta(days=30)
    assert w.lo == prune_before(TODAY) == TODAY - timedelta(days=RETENTION_DAYS)
    assert TODAY in w and w.lo in w and w.hi in w
    assert w.hi + timedelta(days=1) not in w and w.lo - timedelta(days=1) not in w


@given(
    st.dictionaries(st.uuids(), st.frozensets(st.integers(0, 60), max_size=4), max_size=6),
    st.dictionaries(st.uuids(), st.frozensets(st.integers(0, 60), max_size=4), max_size=6),
)
def test_cache_values_round_trip_and_settle_only_when_every_crossed_mark_is_claimed(
    hit: dict[uuid.UUID, frozenset[int]], claimed: dict[uuid.UUID, frozenset[int]]
) -> None:
    assert decode_marks(encode_marks(claimed)) == {str(d): ts for d, ts in claimed.items() if ts}
    settled = settled_by(hit, claimed)
    assert settled == all(ts <= claimed.get(d, frozenset()) for d, ts in hit.items())


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        7,
        "",
        "x",
        "a=",
        "=7",
        "a=7;",
        "a=7,,1",
        "a=-1",
        "a=\u00b2",
        [1, 2],
        {str(uuid.uuid4()): [7]},  # the earlier JSON-object form: claims nothing now
        {5: [7]},
    ],
)
def test_a_damaged_cache_value_claims_nothing(garbage: object) -> None:
    assert decode_marks(garbage) == {}


def test_utc_date_of_an_instant_with_offset() -> None:
    assert utc_date(datetime(2026, 6, 10, 0, 30, tzinfo=UTC)) == TODAY

"""Settings fail fast naming the setting; named SQL loads once and rejects duplicates."""

from __future__ import annotations

import pytest

from db.queries import all_queries, parse, sql
from streams.settings import ConfigError, load_settings


def test_bad_setting_stops_startup_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_BATCH_SIZE", "0")
    with pytest.raises(ConfigError, match="OUTBOX_BATCH_SIZE"):
        load_settings()


def test_non_postgres_url_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://x")
    with pytest.raises(ConfigError, match="DATABASE_URL"):
        load_settings()


def test_topic_prefix_applies_to_every_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPIC_PREFIX", "t1.")
    assert load_settings().topic("pin.calendar.events.v1") == "t1.pin.calendar.events.v1"


def test_named_statements_parse() -> None:
    q = parse("-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;\n")
    assert q == {"a": "SELECT 1;", "b": "SELECT 2;"}
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_every_statement_is_loaded_and_unknown_names_are_named() -> None:
    assert "event_reminders_claim_due" in all_queries()
    with pytest.raises(KeyError, match="no_such"):
        sql("no_such")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OUTBOX_RETENTION_HOURS", "1e12"),
        ("CALENDAR_EVENT_RETENTION_DAYS", "1e9"),
        ("CALENDAR_TOMBSTONE_RETENTION_DAYS", "inf"),
        ("AUTOMATION_SCHEDULER_RETENTION_DAYS", "1e9"),
        ("TIMER_SLOT_RETENTION_DAYS", "1e9"),
    ],
)
def test_a_retention_past_what_a_date_can_hold_stops_startup_with_its_name(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    # Without an upper bound these raised OverflowError (a traceback) when the worker was built.
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        load_settings()


def test_every_outbox_insert_is_visible_in_pg_stat_activity() -> None:
    # pg_stat_activity keeps the first track_activity_query_size (1024) bytes of a statement,
    # comments included; the fault tests find a batch held on the outbox by this text.
    late = {
        name: text.encode().find(b"INSERT INTO ops.outbox")
        for name, text in all_queries().items()
        if "INSERT INTO ops.outbox" in text
    }
    assert late, "no statement writes the outbox"
    assert {n: at for n, at in late.items() if at + len("INSERT INTO ops.outbox") > 1024} == {}

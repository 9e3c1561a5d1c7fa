"""DLQ replay, the pure part: which topic, which instant, and what each DLQ record turns back into."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streams.cli import main
from streams.dlq.cli import describe
from streams.dlq.rules import (
    SKIP_NO_KEY_NO_VALUE,
    SKIP_TRUNCATED,
    ReplayUsageError,
    decide,
    parse_since,
    resolve_topic,
)
from streams.settings import Settings

SRC = "pin.calendar.events.v1"
DLQ = SRC + ".dlq"


def headers(**extra: str) -> list[tuple[str, bytes]]:
    base = {
        "dlq-reason": "value is not valid JSON",
        "dlq-error-kind": "json",
        "dlq-source-topic": SRC,
        "dlq-source-partition": "2",
        "dlq-source-offset": "41",
        **extra,
    }
    return [(k, v.encode()) for k, v in base.items()]


@pytest.mark.parametrize("name", [SRC, DLQ, "p1." + SRC, "p1." + DLQ])
def test_topic_resolves_from_contract_or_dlq_name_with_prefix(name: str) -> None:
    settings = Settings(topic_prefix="p1.")
    assert resolve_topic(settings, name) == ("p1." + SRC, "p1." + DLQ)


@pytest.mark.parametrize("name", ["pin.calendar.reminder-due.v1", "nope", "", "p2." + SRC])
def test_unknown_or_output_topic_is_refused_with_the_known_inputs(name: str) -> None:
    with pytest.raises(ReplayUsageError, match="unknown topic") as err:
        resolve_topic(Settings(topic_prefix="p1."), name)
    assert SRC in str(err.value)


def test_since_needs_iso_8601_with_an_offset() -> None:
    assert parse_since("2026-05-01T12:00:00Z") == datetime(2026, 5, 1, 12, tzinfo=UTC)
    assert parse_since("2026-05-01T14:00:00+02:00").astimezone(UTC).hour == 12
    with pytest.raises(ReplayUsageError, match="no UTC offset"):
        parse_since("2026-05-01T12:00:00")
    with pytest.raises(ReplayUsageError, match="not an ISO-8601"):
        parse_since("yesterday")


def test_record_goes_back_whole_with_only_the_replayed_from_header() -> None:
    d = decide(DLQ, 3, 17, b"k", b"{bad", [*headers(), ("trace", b"t1")], "fallback")
    assert d.skip is None
    assert (d.key, d.value, d.target_topic, d.target_partition) == (b"k", b"{bad", SRC, 2)
    assert d.headers == (("trace", b"t1"), ("dlq-replayed-from", f"{DLQ}:3:17".encode()))
    assert (d.kind, d.reason) == ("json", "value is not valid JSON")


def test_source_topic_falls_back_to_the_command_topic() -> None:
    hs = [h for h in headers() if h[0] not in {"dlq-source-topic", "dlq-source-partition"}]
    d = decide(DLQ, 0, 0, b"k", b"v", hs, "fallback")
    assert (d.target_topic, d.target_partition) == ("fallback", None)


def test_truncated_value_is_never_replayed() -> None:
    d = decide(DLQ, 0, 5, b"k", b"x" * 10, headers(**{"dlq-value-truncated": "true"}), SRC)
    assert d.skip == SKIP_TRUNCATED and d.value is None


def test_tombstone_goes_back_as_a_tombstone_and_null_record_is_skipped() -> None:
    tomb = decide(DLQ, 0, 1, b"k", b"", headers(**{"dlq-value-null": "true"}), SRC)
    assert tomb.skip is None and (tomb.key, tomb.value) == (b"k", None)
    nothing = decide(DLQ, 0, 2, None, b"", headers(**{"dlq-value-null": "true"}), SRC)
    assert nothing.skip == SKIP_NO_KEY_NO_VALUE


def test_dry_run_line_names_coordinates_kind_and_reason_but_never_the_value() -> None:
    line = describe(decide(DLQ, 3, 17, b"k", b"secret-value", headers(), SRC))
    assert "partition=3 offset=17 kind=json action=replay" in line
    assert "value is not valid JSON" in line and "secret-value" not in line


def test_cli_refuses_unknown_topic_and_bad_since_with_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("streams.cli.install_log_redaction", lambda: None)  # process-wide
    settings = Settings(kafka_bootstrap="127.0.0.1:1")  # never reached: checked before
    assert main(["dlq", "replay", "pin.nope.v1"], settings=settings) == 2
    assert "unknown topic 'pin.nope.v1'" in capsys.readouterr().err
    assert main(["dlq", "replay", SRC, "--since", "last tuesday"], settings=settings) == 2
    assert "--since 'last tuesday'" in capsys.readouterr().err
    soon = (datetime.now(UTC) + timedelta(days=1)).replace(tzinfo=None).isoformat()
    assert main(["dlq", "replay", SRC, "--since", soon], settings=settings) == 2
    assert main(["dlq", "replay"], settings=settings) == 2

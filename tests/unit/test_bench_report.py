"""The bench's pure parts: measures and their verdicts, the summary table, the JSON round trip,
the comparison with an earlier run, the progress bar, and the bare pipeline's rows."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import types
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from uuid import UUID

import pytest

from bench.cli import BENCHES, EXIT_OK, EXIT_USAGE, EXIT_WORSE, main
from bench.compare import Change, compare, format_changes, gain, regressions
from bench.pipeline import event_columns, newest, reminder_columns
from bench.progress import Progress, render
from bench.quiet import QuietWait
from bench.report import (
    REPORT,
    Measure,
    PgMode,
    Target,
    document,
    heading,
    measure,
    measures_of,
    mode_mismatch,
    number,
    table,
)
from streams.contracts.calendar import CalendarEventChanged
from streams.domain.calendar import insertable, wanted_reminders

ROOT = Path(__file__).resolve().parents[2]


def rate(name: str, project: float, reference: float | None = None, **kw: object) -> Measure:
    return measure(name, "rows/s", project, reference, **kw)  # type: ignore[arg-type]


def seconds(name: str, project: float, reference: float | None = None, **kw: object) -> Measure:
    return measure(name, "s", project, reference, higher_is_better=False, **kw)  # type: ignore[arg-type]


# -- measures and verdicts -------------------------------------------------------------------


def test_ratio_is_project_over_reference_and_ratio_targets_judge_it() -> None:
    m = rate("dispatch", 6_000, 10_000, targets=[Target(">=", 0.6, on="ratio")])
    assert m.ratio == pytest.approx(0.6)
    assert m.passed is True
    assert m.target == "≥ 0.6x"
    assert rate("dispatch", 5_900, 10_000, targets=[Target(">=", 0.6, on="ratio")]).passed is False


def test_every_target_must_hold() -> None:
    targets = [Target(">=", 5000), Target(">=", 0.5, on="ratio")]
    assert measure("ingest", "events/s", 5_500, 10_000, targets=targets).passed is True
    # Fast enough in absolute terms, too slow against the reference: fails.
    assert measure("ingest", "events/s", 5_500, 12_000, targets=targets).passed is False
    assert measure("ingest", "events/s", 4_000, 6_000, targets=targets).passed is False
    assert measure("ingest", "events/s", 1, 2, targets=targets).target == (
        "≥ 5,000 events/s and ≥ 0.5x"
    )


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [("<", 59.9, True), ("<", 60.0, False), ("<=", 60.0, True), (">", 60.0, False)],
)
def test_bounds_are_strict_or_not_as_written(op: str, value: float, expected: bool) -> None:
    assert seconds("expiry", value, targets=[Target(op, 60)]).passed is expected  # type: ignore[arg-type]


def test_no_target_is_informational_and_an_unjudgeable_target_is_not_a_pass() -> None:
    info = rate("two vs one", 3_000, 2_000)
    assert (info.passed, info.target) == (None, REPORT)
    # A ratio target without a reference cannot be judged: neither pass nor fail.
    assert rate("x", 1.0, None, targets=[Target(">=", 0.5, on="ratio")]).passed is None
    assert rate("x", math.nan, targets=[Target(">=", 1)]).passed is None
    assert rate("x", 1.0, 0.0).ratio is None


def test_numbers_get_the_digits_they_deserve() -> None:
    assert [number(v) for v in (12_345.6, 123.4, 12.34, 1.234, 0.01234, 0, None)] == [
        "12,346", "123", "12.3", "1.23", "0.0123", "0", "—",
    ]  # fmt: skip


# -- the table ---------------------------------------------------------------------------------


def test_table_has_one_row_per_measure_with_the_verdicts_and_a_count() -> None:
    measures = [
        rate("dispatch: real vs bare", 14_338, 27_343, targets=[Target(">=", 0.6, on="ratio")]),
        measure(
            "claim", "ms", 1.4, 1.0, targets=[Target("<=", 2, on="ratio")], higher_is_better=False
        ),
        rate("two vs one", 3_000, 2_000),
    ]
    text = table(measures)
    lines = text.splitlines()
    assert lines[0].split() == ["measure", "project", "reference", "ratio", "target", "result"]
    dispatch = next(line for line in lines if line.startswith("dispatch"))
    assert "14,338 rows/s" in dispatch and "27,343 rows/s" in dispatch
    assert "0.52x" in dispatch and dispatch.rstrip().endswith("FAIL")
    assert next(line for line in lines if line.startswith("claim")).rstrip().endswith("pass")
    assert "report" in next(line for line in lines if line.startswith("two vs one"))
    assert lines[-1].startswith("1 passed, 1 failed, 1 informational")
    # Columns line up: every verdict starts where the header's "result" does.
    column = lines[0].index("result")
    assert [line[column:].strip() for line in lines[2:5]] == ["FAIL", "pass", "—"]


# -- JSON --------------------------------------------------------------------------------------


def test_json_round_trip_keeps_every_field_and_writes_nan_as_null() -> None:
    measures = [
        rate("a", 10.0, 20.0, targets=[Target(">=", 0.6, on="ratio")], bench="x", detail="d"),
        seconds("b", math.nan),
    ]
    doc = json.loads(json.dumps(document(measures, {"cpu_count": 2}), allow_nan=False))
    assert doc["machine"] == {"cpu_count": 2}
    assert doc["measures"][1]["project"] is None
    back = measures_of(doc)
    assert back[0] == measures[0]
    assert math.isnan(back[1].project) and back[1].higher_is_better is False


# -- comparison --------------------------------------------------------------------------------


def test_gain_is_positive_when_better_in_either_direction() -> None:
    assert gain(100, 130, higher_is_better=True) == pytest.approx(0.3)
    assert gain(100, 130, higher_is_better=False) == pytest.approx(-0.3)
    assert gain(0, 5, higher_is_better=True) is None


def test_more_than_25_percent_worse_is_a_regression_in_the_measures_direction() -> None:
    before = [rate("rate", 1000), seconds("time", 10.0), rate("steady", 1000)]
    after = [rate("rate", 740), seconds("time", 12.4), rate("steady", 760)]
    changes = {c.name: c for c in compare(before, after)}
    assert changes["rate"].worse  # 26% fewer rows/s
    assert not changes["time"].worse  # 24% more seconds: inside the threshold
    assert not changes["steady"].worse
    assert [c.name for c in regressions(list(changes.values()))] == ["rate"]
    slower = compare([seconds("time", 10.0)], [seconds("time", 12.6)])
    assert slower[0].worse and slower[0].gain == pytest.approx(-0.26)
    faster = compare([seconds("time", 10.0)], [seconds("time", 5.0)])
    assert not faster[0].worse and faster[0].gain == pytest.approx(0.5)


def test_the_ratio_is_judged_when_both_runs_have_one() -> None:
    # The machine was busier: both figures fell, their ratio held.
    before = [rate("dispatch", 10_000, 20_000)]
    after = [rate("dispatch", 6_000, 12_000)]
    (c,) = compare(before, after)
    assert (c.basis, c.worse) == ("ratio", False)
    (c,) = compare(before, [rate("dispatch", 6_000, 20_000)])
    assert (c.basis, c.worse) == ("ratio", True)


def test_new_and_gone_measures_are_listed_but_never_regressions() -> None:
    changes = compare([rate("old", 1)], [rate("new", 1)])
    assert [(c.name, c.basis, c.worse) for c in changes] == [
        ("new", "new", False),
        ("old", "gone", False),
    ]
    text = format_changes(changes)
    assert "not measured in this run" in text and "no measure more than 25% worse" in text


def test_format_changes_names_the_regressions() -> None:
    text = format_changes(compare([rate("ingest", 2000)], [rate("ingest", 1000)]))
    assert "50.0% worse" in text and "more than 25% worse: ingest" in text
    assert isinstance(compare([rate("a", 1)], [rate("a", 1)])[0], Change)


# -- the command line: --compare FILE --against OTHER ------------------------------------------


def write(path: Path, measures: list[Measure]) -> Path:
    path.write_text(json.dumps(document(measures, {"quick": False})))
    return path


def test_cli_compares_two_files_without_running_and_exits_by_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = write(tmp_path / "before.json", [rate("ingest", 2000), seconds("expiry", 50)])
    same = write(tmp_path / "same.json", [rate("ingest", 1900), seconds("expiry", 55)])
    worse = write(tmp_path / "worse.json", [rate("ingest", 1400), seconds("expiry", 55)])
    assert main(["--compare", str(before), "--against", str(same)]) == EXIT_OK
    assert main(["--compare", str(before), "--against", str(worse)]) == EXIT_WORSE
    assert "more than 25% worse: ingest" in capsys.readouterr().out
    assert main(["--compare", str(tmp_path / "absent.json"), "--against", str(same)]) == EXIT_USAGE
    assert main(["--against", str(same)]) == EXIT_USAGE
    assert main(["nosuchbench"]) == EXIT_USAGE


def test_python_m_bench_exit_code_is_the_comparisons(tmp_path: Path) -> None:
    before = write(tmp_path / "before.json", [seconds("claim", 1.0, 1.0)])
    worse = write(tmp_path / "worse.json", [seconds("claim", 3.0, 1.0)])
    args = [sys.executable, "-m", "bench", "--compare", str(before), "--against"]
    ok = subprocess.run([*args, str(before)], cwd=ROOT, capture_output=True, text=True)
    bad = subprocess.run([*args, str(worse)], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert bad.returncode == 1, bad.stderr
    assert "200.0% worse" in bad.stdout


DURABLE = PgMode("on", "on")


@pytest.fixture
def fake_benches(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """Two benches that need no services: ``fine`` (its rate settable) and ``boom`` (crashes);
    the server's mode is durable unless a test says otherwise."""
    figures = {"rate": 1000.0}
    monkeypatch.setattr("bench.cli.pg_mode", lambda: DURABLE)
    monkeypatch.delenv("BENCH_PG", raising=False)

    async def no_wait(before: str, **_: object) -> QuietWait:
        return QuietWait(before, 0.5, 0.25, False)

    monkeypatch.setattr("bench.quiet.quiet", no_wait)

    async def fine_run(**_: object) -> list[Measure]:
        return [rate("fine: rate", figures["rate"])]

    async def boom_run(**_: object) -> list[Measure]:
        raise RuntimeError("boom")

    for name, fn in (("fine", fine_run), ("boom", boom_run)):
        module = types.ModuleType(f"fake_bench_{name}")
        module.run = fn  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
        monkeypatch.setitem(BENCHES, name, (module.__name__, "fake"))
    return figures


def test_a_run_writes_the_json_and_compares_with_the_earlier_file(
    tmp_path: Path, fake_benches: dict[str, float], capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert main(["fine", "--json", str(first)]) == EXIT_OK
    doc = json.loads(first.read_text())
    assert doc["machine"]["benches"] == ["fine"] and doc["machine"]["cpu_count"]
    assert [m["name"] for m in doc["measures"]] == ["fine: rate"]
    assert "fine: rate" in capsys.readouterr().out
    fake_benches["rate"] = 700.0  # 30% fewer rows/s
    assert main(["fine", "--json", str(second), "--compare", str(first)]) == EXIT_WORSE
    assert "30.0% worse" in capsys.readouterr().out
    # The earlier file may be the one this run writes: it is read before it is replaced.
    fake_benches["rate"] = 1000.0
    assert main(["fine", "--json", str(second), "--compare", str(second)]) == EXIT_OK


def test_a_crashed_bench_fails_the_run_but_the_others_are_in_the_table(
    tmp_path: Path, fake_benches: dict[str, float], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    assert main(["boom", "fine", "--json", str(out)]) == EXIT_WORSE
    rows = {m["name"]: m for m in json.loads(out.read_text())["measures"]}
    assert rows["boom: crashed"]["passed"] is False and "fine: rate" in rows
    assert "FAIL" in capsys.readouterr().out


# -- which PostgreSQL the run had ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fsync", "synchronous_commit", "name"),
    [
        ("on", "on", "durable"),
        ("on", "remote_apply", "durable"),
        ("on", "local", "durable"),
        ("off", "off", "fast"),
        ("on", "off", "mixed"),
        ("off", "on", "mixed"),
        ("", "", "mixed"),
    ],
)
def test_pg_mode_is_named_from_what_the_server_shows(
    fsync: str, synchronous_commit: str, name: str
) -> None:
    assert PgMode(fsync, synchronous_commit).name == name


def test_heading_names_the_commit_and_the_postgres_mode() -> None:
    info = {
        "date": "2026-12-02T10:00:00+00:00",
        "seconds": 61.4,
        "git_commit": "abc123",
        "postgres": PgMode("on", "on").to_json(),
    }
    assert heading(info) == (
        "== summary (2026-12-02T10:00:00+00:00, 61 s, commit abc123, "
        "PostgreSQL durable: fsync=on, synchronous_commit=on) =="
    )
    fast = heading({**info, "postgres": PgMode("off", "off").to_json()})
    assert fast.endswith("PostgreSQL fast: fsync=off, synchronous_commit=off) ==")
    # An old file without the field is shown as unknown, never as durable.
    assert "PostgreSQL mixed: fsync=?, synchronous_commit=?" in heading({"date": "d"})


def test_bench_pg_refuses_a_server_in_the_other_mode() -> None:
    assert mode_mismatch(None, PgMode("off", "off")) is None
    assert mode_mismatch("durable", DURABLE) is None
    assert mode_mismatch("fast", PgMode("off", "off")) is None
    refused = mode_mismatch("durable", PgMode("off", "off"))
    assert refused is not None and "fsync=off" in refused and "STACK_PG_DURABLE=1" in refused
    assert "must be one of durable, fast" in (mode_mismatch("slow", DURABLE) or "")


def test_the_run_records_mode_and_commit_in_heading_and_json(
    tmp_path: Path,
    fake_benches: dict[str, float],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "run.json"
    assert main(["fine", "--json", str(out)]) == EXIT_OK
    doc = json.loads(out.read_text())
    assert doc["machine"]["postgres"] == {
        "mode": "durable",
        "fsync": "on",
        "synchronous_commit": "on",
    }
    assert doc["machine"]["git_commit"]
    printed = capsys.readouterr().out
    summary = next(line for line in printed.splitlines() if line.startswith("== summary"))
    assert summary == heading(doc["machine"])
    assert f"commit {doc['machine']['git_commit']}" in summary
    assert "PostgreSQL durable: fsync=on, synchronous_commit=on" in summary
    # The wait for a quiet database before the bench is in the JSON and the heading.
    assert doc["machine"]["quiet_waits"] == [QuietWait("fine", 0.5, 0.25, False).to_json()]
    assert "quiet database before each bench (1 waits, 0.8 s in all" in summary
    # A fast server under BENCH_PG=durable: refused before any bench runs, nothing written.
    monkeypatch.setattr("bench.cli.pg_mode", lambda: PgMode("off", "off"))
    monkeypatch.setenv("BENCH_PG", "durable")
    other = tmp_path / "other.json"
    assert main(["fine", "--json", str(other)]) == EXIT_USAGE
    assert not other.exists()
    # BENCH_PG=fast on it runs, and a comparison with the durable run says they differ.
    monkeypatch.setenv("BENCH_PG", "fast")
    assert main(["fine", "--json", str(other), "--compare", str(out)]) == EXIT_OK
    assert "the earlier run was on PostgreSQL durable, this one on fast" in capsys.readouterr().out


def test_help_lists_the_benches() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    for name in ("dispatch", "lateness", "claim", "ingest", "automation", "expiry"):
        assert f"\n  {name} " in out.stdout


# -- progress ----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_render_shows_bar_share_counts_and_time() -> None:
    assert render("seed", 250, 1000, 3.0, "rows", width=8) == (
        "seed  [##......]  25%  250/1,000 rows  3.0 s"
    )
    assert render("wait", 0, None, 1.5) == "wait  1.5 s"


def test_on_a_terminal_the_bar_redraws_one_line_in_place() -> None:
    out, clock = io.StringIO(), Clock()
    with Progress("seed", 100, stream=out, tty=True, clock=clock) as p:
        p.update(10)
        clock.now = 0.1
        p.update(20)  # too soon after the last redraw: not drawn
        clock.now = 0.5
        p.update(50)
    text = out.getvalue()
    assert "\n" not in text.rstrip("\n") and text.endswith("\n")
    assert text.count("\r") == 3 and "20/100" not in text and "100/100" not in text
    assert "50/100" in text.rsplit("\r", 1)[1]


def test_in_a_log_it_prints_a_plain_line_now_and_then_and_the_last_one() -> None:
    out, clock = io.StringIO(), Clock()
    with Progress("seed", 100, stream=out, tty=False, clock=clock, line_every=10) as p:
        for i in range(1, 101):
            clock.now = i * 0.3  # 30 s in all
            p.update(i)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 2 + 1  # once 10 s and 20 s have passed, and the final line
    assert lines[0].endswith("34/100  10.2 s")
    quick = io.StringIO()
    with Progress("blink", 10, stream=quick, tty=False, clock=clock) as p:
        p.update(10)
    assert quick.getvalue() == ""  # a phase over in under a second leaves the log alone
    assert lines[-1].endswith("100/100  30.0 s")


# -- the bare pipeline writes the worker's rows ------------------------------------------------


def body(event_id: str, version: int, start: datetime, offsets: list[int], status: str) -> dict:
    return {
        "ContractVersion": 1, "EventId": event_id,
        "TenantId": "11111111-1111-1111-1111-111111111111",
        "OwnerUserId": "22222222-2222-2222-2222-222222222222", "Kind": "Meeting",
        "StartAt": start.isoformat(), "TimeZone": "Europe/Berlin", "Status": status,
        "ReminderOffsetsMinutes": offsets, "Version": version,
        "OccurredAt": datetime(2026, 6, 1, 9, tzinfo=UTC).isoformat(),
    }  # fmt: skip


def test_bare_pipeline_reminders_are_the_domains_wanted_and_insertable_rows() -> None:
    # 12:00+02:00 = 10:00Z; written with an offset, ids are made from the UTC form.
    start = datetime(2026, 6, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    eid = "33333333-3333-3333-3333-333333333333"
    # 60 min before is 09:00Z = OccurredAt (kept); 240 min before is 06:00Z (not inserted).
    msg = body(eid, 3, start, [15, 60, 15, 240], "Planned")
    cols = reminder_columns([(msg, 2, 40)], {eid})
    event = CalendarEventChanged.model_validate(msg)
    expected = insertable(wanted_reminders(event), event.occurred_at)
    assert cols[0] == [s.reminder_id for s in expected]
    assert cols[2] == [15, 60] and cols[3] == [s.due_at for s in expected]
    assert cols[4:] == [[2, 2], [40, 40], [3, 3]]
    assert reminder_columns([(msg, 2, 40)], set()) == [[] for _ in range(7)]  # not applied
    closed = body(eid, 4, start, [15], "Cancelled")
    assert reminder_columns([(closed, 2, 41)], {eid})[0] == []


def test_bare_pipeline_events_keep_the_newest_version_and_sorted_offsets() -> None:
    start = datetime(2026, 6, 1, 12, tzinfo=UTC)
    a, b = "44444444-4444-4444-4444-444444444444", "55555555-5555-5555-5555-555555555555"
    batch = newest(
        [
            (body(a, 2, start, [60, 15], "Planned"), 0, 1),
            (body(a, 1, start, [5], "Planned"), 0, 2),
            (body(b, 1, start, [], "Planned"), 1, 7),
        ]
    )
    cols = event_columns(batch)
    assert cols[0] == [a, b] and cols[10] == [2, 1]
    assert cols[8] == ["{15,60}", "{}"]
    assert cols[12:] == [[0, 1], [1, 7]]
    assert UUID(cols[0][0])

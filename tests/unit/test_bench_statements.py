"""The bench's per-statement breakdown names each statement as db/queries has it."""

from __future__ import annotations

from bench.statements import Statement, lines, name_of
from db.queries import sql


def test_a_statement_is_named_from_its_text_as_pg_stat_statements_keeps_it() -> None:
    body = sql("document_expiry_reminders_claim")
    kept = body[body.index("WITH docs") :]  # the leading comments are not kept
    assert name_of(kept) == "document_expiry_reminders_claim"
    assert name_of("SELECT 42 AS answer") == "SELECT 42 AS answer"
    # The whole text, its leading comments included, names it too.
    assert name_of(sql("document_expiry_reminders_backlog_count")) == (
        "document_expiry_reminders_backlog_count"
    )


def test_lines_rank_what_was_spent_between_two_snapshots() -> None:
    before = {1: Statement(10, 100.0, "SELECT 101"), 2: Statement(5, 50.0, "SELECT 102")}
    after = {
        1: Statement(12, 1_100.0, "SELECT 101"),
        2: Statement(5, 50.0, "SELECT 102"),
        3: Statement(3, 3_000.0, "SELECT 103"),
    }
    head, first, second = lines(before, after)
    assert head == "statement time 4.0 s in 5 statements:"
    assert first.split() == ["3.00", "s", "3", "calls", "SELECT", "103"]
    assert second.split() == ["1.00", "s", "2", "calls", "SELECT", "101"]

"""The expiry bench's PostgreSQL CPU by statement: backends' CPU between two samples charged
to the statement each runs (or ran last), named as db/queries has it."""

from __future__ import annotations

import pytest

from bench.backend_cpu import Seen, charge, statement_name
from db.queries import all_queries, sql


def test_a_statement_is_named_from_the_1024_bytes_pg_stat_activity_keeps() -> None:
    named = all_queries()
    claim = sql("document_expiry_reminders_claim")
    assert len(claim) > 1024
    assert statement_name(claim[:1024], named) == "document_expiry_reminders_claim"
    assert statement_name(sql("outbox_pending_get"), named) == "outbox_pending_get"
    assert statement_name("COMMIT", named) == "COMMIT"
    assert statement_name("", named) == "(no statement yet)"


def test_cpu_between_samples_goes_to_the_statement_running_at_the_first() -> None:
    before = {
        1: Seen(1, 10.0, "COMMIT", active=False),
        2: Seen(2, 5.0, "claim"),
        3: Seen(3, 7.0, "claim", active=False),
        5: Seen(5, 1.0, "claim"),
    }
    now = [
        Seen(1, 10.5, "claim"),  # idle before: its CPU since went to the claim it runs now
        Seen(2, 6.25, "COMMIT", active=False),  # the claim's end, not its COMMIT
        Seen(4, 3.0, "new backend"),  # not seen before: nothing to charge yet
        Seen(3, 7.0, "claim", active=False),  # used nothing
        Seen(5, 1.5, "outbox_pending_get"),  # the claim's end, then the next statement
    ]
    assert charge(before, now) == pytest.approx({"claim": 2.25})

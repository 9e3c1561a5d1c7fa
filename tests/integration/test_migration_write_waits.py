"""Migrations never make writes wait on a large table: the big tables filled with millions of
rows, every migration numbered above BASELINE (found by itself) applied one by one while a
dispatcher-like writer updates and inserts, and no write may wait WAIT_LIMIT (1 s) or more.

The harness checks itself on the same tables: a released plain CREATE INDEX (0026's, on
calendar.event_reminders) replayed under the writer makes writes wait past the limit, and the
same build written as the rule asks (CONCURRENTLY, no transaction) does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from db.migrate import migrate
from devkit.migration_waits import (
    BASELINE,
    RULE,
    WAIT_LIMIT,
    baseline_copy,
    fill,
    measure,
    replays,
    table,
)

pytestmark = [pytest.mark.integration, pytest.mark.migration_waits]


@pytest.mark.timeout(600)
async def test_no_migration_above_the_baseline_makes_a_write_wait(
    empty_database_url: str, tmp_path: Path
) -> None:
    url = empty_database_url
    later = baseline_copy(tmp_path, BASELINE)
    await migrate(url, tmp_path)
    await fill(url)
    plain, concurrent = replays((26,)), replays((26,), concurrently=True)
    run = await measure(url, tmp_path, [*later, *plain, *concurrent])
    rows = run.rows
    print(f"\n{table(rows)}\n{run.writes} writes")
    assert not run.errors, run.errors
    assert run.writes > 100, "the writer hardly wrote: nothing was measured"
    slow = [r for r in rows[: len(later)] if r.longest_write >= WAIT_LIMIT]
    assert not slow, (
        f"a write waited {WAIT_LIMIT:g} s or more while these migrations ran: "
        + ", ".join(f"{r.migration} ({r.longest_write:.2f} s on {r.table})" for r in slow)
        + f"; {RULE}\n{table(rows)}"
    )
    replayed_plain, replayed_concurrent = rows[len(later)], rows[len(later) + 1]
    assert replayed_plain.longest_write >= WAIT_LIMIT, (
        f"the harness did not see 0026's plain build block writes:\n{table(rows)}"
    )
    assert replayed_concurrent.longest_write < WAIT_LIMIT, table(rows)

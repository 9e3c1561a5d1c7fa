"""No-transaction migrations (db/migration_steps.py): the directive, the split into statements,
the re-runnable forms their statements must take; and the rule for every migration from now
on: no plain CREATE INDEX on an existing table (it holds a write lock for the whole build)."""

from __future__ import annotations

from pathlib import Path

import pytest

from db import migration_steps as steps
from db.migrate import MIGRATIONS_DIR, Migration, MigrationError, discover
from devkit.migration_waits import BASELINE, RULE


def test_the_directive_counts_only_among_the_leading_comments() -> None:
    assert steps.no_transaction("-- migrate: no-transaction\nCREATE INDEX CONCURRENTLY x;")
    assert steps.no_transaction("-- Why.\n\n-- migrate: no-transaction\nSELECT 1;")
    assert not steps.no_transaction("SELECT 1;\n-- migrate: no-transaction\n")
    assert not steps.no_transaction("-- no directive\nSELECT 1;")


def test_split_keeps_semicolons_inside_strings_comments_and_bodies() -> None:
    sql = (
        "-- one; two\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a ON s.t (x) WHERE y = 'a;b';\n"
        "/* c; d */ COMMENT ON TABLE s.t IS $q$x; y$q$;\n"
        'ALTER INDEX IF EXISTS s."odd;name" RENAME TO b;\n-- trailing; comment\n'
    )
    parts = steps.split(sql)
    assert len(parts) == 3
    assert parts[0].endswith("WHERE y = 'a;b';")
    assert "$q$x; y$q$" in parts[1]
    assert '"odd;name"' in parts[2]


def test_statements_of_a_no_transaction_migration_must_be_re_runnable() -> None:
    ok = steps.split(
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS a ON s.t (x);\n"
        "DROP INDEX CONCURRENTLY IF EXISTS s.old;\nALTER INDEX IF EXISTS s.a RENAME TO b;"
    )
    assert steps.check("0031_x.sql", ok) == []
    bad = steps.split("CREATE INDEX a ON s.t (x);\nDROP INDEX s.old;")
    problems = steps.check("0031_x.sql", bad)
    assert len(problems) == 2 and "CONCURRENTLY IF NOT EXISTS" in problems[0]
    built = steps.index_build(ok[0])
    assert built == steps.IndexBuild("s", "a")


def test_discover_refuses_a_no_transaction_migration_that_cannot_run_again(
    tmp_path: Path,
) -> None:
    (tmp_path / "0001_x.sql").write_text(
        "-- migrate: no-transaction\nCREATE INDEX CONCURRENTLY a ON s.t (x);\n"
    )
    with pytest.raises(MigrationError, match="IF NOT EXISTS"):
        discover(tmp_path)


def test_the_check_finds_the_released_blocking_builds() -> None:
    """0024, 0026 and 0028 built indexes on big existing tables under a write lock."""
    by_number = {m.version: m for m in discover()}
    assert steps.blocking_index_builds(by_number[26].sql) == [
        "calendar.event_reminders",
        "automation.scheduler",
        "profile.document_expiry_reminders",
    ]
    assert "automation.scheduler" in steps.blocking_index_builds(by_number[24].sql)
    assert steps.blocking_index_builds(by_number[28].sql) == ["profile.person_documents"]
    # A table the migration creates itself is new, hence empty: not a blocking build.
    assert (
        steps.blocking_index_builds("CREATE TABLE s.n (x int);\nCREATE INDEX i ON s.n (x);") == []
    )


@pytest.mark.parametrize(
    "migration",
    [m for m in discover(MIGRATIONS_DIR) if m.version > BASELINE] or [None],
    ids=lambda m: m.name if m is not None else "none-yet",
)
def test_every_new_migration_builds_indexes_concurrently(migration: Migration | None) -> None:
    if migration is None:
        return
    blocking = steps.blocking_index_builds(migration.sql)
    assert blocking == [], f"{migration.name}: plain CREATE INDEX on {blocking}: {RULE}"

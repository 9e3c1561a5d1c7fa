"""How long writes wait while migrations run: the big tables filled with millions of rows
(generate_series), a dispatcher-like writer (UPDATE and INSERT on each of them, one statement
at a time, timed), and migrations applied one by one with the longest write during each.

tests/integration/test_migration_write_waits.py applies every migration above BASELINE this
way and fails when a write waited WAIT_LIMIT or more: a migration must never hold a write
lock on a large table (``lock_timeout`` bounds only the wait for a lock, not how long it is
held). ``python -m devkit.migration_waits`` prints the figures, the released blocking index
builds (0024, 0026, 0028) replayed included.
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from db import migration_steps
from db.connector import connect
from db.migrate import MIGRATIONS_DIR, Migration, discover, migrate

# Migrations up to here were released before the rule (their content is checksummed and
# stays); every migration numbered above it is applied by the test, new ones found by
# themselves.
BASELINE = 30
# A write that waits this long (seconds) during a migration fails the test.
WAIT_LIMIT = 1.0
# Rows per table: millions where production has them.
ROWS = {
    "calendar.event_reminders": 2_000_000,
    "automation.scheduler": 1_000_000,
    "profile.person_documents": 1_000_000,
    "profile.document_expiry_reminders": 1_000_000,
    "ops.outbox": 300_000,
}
RULE = (
    "use CREATE INDEX CONCURRENTLY IF NOT EXISTS in a migration whose leading comments say "
    "'-- migrate: no-transaction' (docs/architecture.md, Slices: SQL)"
)

# Test data. Keys are in row order (a digit per table, then the row number in hex), so each
# B-tree fills from one end, and the writer derives its targets from a row number (key()).
PREFIX = {"event": "1", "reminder": "2", "document": "3", "marker": "4"}
REMINDERS_PER_EVENT = 4


def key(kind: str, n: int) -> str:
    return str(uuid.UUID(f"{PREFIX[kind]}{n:031x}"))


def _sql_key(kind: str, n: str) -> str:
    return f"('{PREFIX[kind]}' || lpad(to_hex({n}), 31, '0'))::uuid"


_FILL = (
    f"""INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at,
        time_zone, status, version, occurred_at)
    SELECT {_sql_key("event", "n")}, {_sql_key("event", "n % 50")},
        {_sql_key("event", "n % 20000")}, 'Appointment', now() + n * interval '1 minute', 'UTC',
        'Planned', 1, now()
    FROM generate_series(1, $1) n""",
    # Four in five reminders are history (Sent), as in production.
    f"""INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at,
        status, sent_at)
    SELECT {_sql_key("reminder", "n")}, {_sql_key("event", "1 + (n - 1) / $2")}, n % $2,
        now() + n * interval '1 second',
        CASE WHEN n % 5 < 4 THEN 'Sent' ELSE 'Pending' END,
        CASE WHEN n % 5 < 4 THEN now() END
    FROM generate_series(1, $1) n""",
    # Four in five scheduler rows are done (Completed), as in production.
    """INSERT INTO automation.scheduler (automation_type_id, trigger_type_id, scheduler_key,
        scheduled_on, input_hash, status_id)
    SELECT 'Reminder', 'DateBased', 'k' || lpad(n::text, 9, '0'), now() + n * interval '1 second',
        repeat('ab', 32), CASE WHEN n % 5 < 4 THEN 'Completed' ELSE 'Pending' END
    FROM generate_series(1, $1) n""",
    f"""INSERT INTO profile.person_documents (document_id, owner_user_id, person_id, type,
        expires_at, status, version, occurred_at)
    SELECT {_sql_key("document", "n")}, {_sql_key("document", "n / 50")},
        {_sql_key("document", "n / 2")}, 'Passport', current_date + (n % 900), 'Active', 1, now()
    FROM generate_series(1, $1) n""",
    f"""INSERT INTO profile.document_expiry_reminders (id, document_id, owner_user_id, type,
        threshold_days, expires_at, reminded_at)
    SELECT {_sql_key("marker", "n")}, {_sql_key("document", "n")},
        {_sql_key("document", "n / 50")}, 'Passport', 30, current_date + (n % 900),
        now() - (n % 1000) * interval '1 hour'
    FROM generate_series(1, $1) n""",
    """INSERT INTO ops.outbox (topic, key, payload)
    SELECT 'reminders.due', 'k' || n, '{"n": 1}'::json FROM generate_series(1, $1) n""",
)
_FILL_ROWS = (
    lambda: (ROWS["calendar.event_reminders"] // REMINDERS_PER_EVENT,),
    lambda: (ROWS["calendar.event_reminders"], REMINDERS_PER_EVENT),
    lambda: (ROWS["automation.scheduler"],),
    lambda: (ROWS["profile.person_documents"],),
    lambda: (ROWS["profile.document_expiry_reminders"],),
    lambda: (ROWS["ops.outbox"],),
)

# What the calendar applier, a dispatcher, a materializer, the scheduler and document expiry
# write, by key.
_WRITES = (
    (
        "calendar.events",
        "UPDATE calendar.events SET version = version + 1, updated_at = now() "
        "WHERE event_id = $1::uuid",
        lambda n: (
            key("event", n % (ROWS["calendar.event_reminders"] // REMINDERS_PER_EVENT) + 1),
        ),
    ),
    (
        "calendar.event_reminders",
        "UPDATE calendar.event_reminders SET status = 'Sent', sent_at = now(), "
        "updated_at = now() WHERE reminder_id = $1::uuid",
        lambda n: (key("reminder", n % ROWS["calendar.event_reminders"] + 1),),
    ),
    (
        "calendar.event_reminders",
        "INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at) "
        "VALUES (gen_random_uuid(), $1::uuid, -1, now())",
        lambda n: (
            key("event", n % (ROWS["calendar.event_reminders"] // REMINDERS_PER_EVENT) + 1),
        ),
    ),
    (
        "automation.scheduler",
        "UPDATE automation.scheduler SET updated_on = now(), version = version + 1 "
        "WHERE scheduler_id = $1",
        lambda n: (n % ROWS["automation.scheduler"] + 1,),
    ),
    (
        "profile.person_documents",
        "UPDATE profile.person_documents SET version = version + 1, updated_at = now() "
        "WHERE document_id = $1::uuid",
        lambda n: (key("document", n % ROWS["profile.person_documents"] + 1),),
    ),
    (
        "profile.document_expiry_reminders",
        "INSERT INTO profile.document_expiry_reminders (id, document_id, owner_user_id, type,"
        " threshold_days, expires_at, reminded_at) VALUES (gen_random_uuid(),"
        " gen_random_uuid(), gen_random_uuid(), 'Passport', 7, current_date, now())",
        lambda n: (),
    ),
    (
        "ops.outbox",
        "INSERT INTO ops.outbox (topic, key, payload) VALUES ('reminders.due', $1, '{}')",
        lambda n: (f"w{n}",),
    ),
)


_FILL_TABLES = (
    "calendar.events",
    "calendar.event_reminders",
    "automation.scheduler",
    "profile.person_documents",
    "profile.document_expiry_reminders",
    "ops.outbox",
)
_SECONDARY_INDEXES = """
    SELECT i.indexdef, format('DROP INDEX %I.%I', i.schemaname, i.indexname) AS drop
    FROM pg_indexes i
    WHERE i.schemaname || '.' || i.tablename = $1
      AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                      WHERE c.conindid = format('%I.%I', i.schemaname, i.indexname)::regclass)
"""


async def fill(url: str) -> None:
    """The big tables, filled at once, one connection each: a table's secondary indexes are
    built after its rows are in (faster than row by row), foreign-key triggers are off."""
    await asyncio.gather(
        *(
            _fill_one(url, name, statement, args())
            for name, statement, args in zip(_FILL_TABLES, _FILL, _FILL_ROWS, strict=True)
        )
    )


async def _fill_one(url: str, name: str, statement: str, args: tuple[int, ...]) -> None:
    conn = await connect(url)
    try:
        secondary = await conn.fetch(_SECONDARY_INDEXES, name)
        for index in secondary:
            await conn.execute(index["drop"])
        await conn.execute("SET session_replication_role = replica")
        await conn.execute(statement, *args)
        await conn.execute("RESET session_replication_role")
        for index in secondary:
            await conn.execute(index["indexdef"])
        await conn.execute(f"ANALYZE {name}")
    finally:
        await conn.close()


@dataclass
class Writer:
    """Writes one statement after another on its own connection, timing each."""

    url: str
    # (started at, seconds it took, table) per write, in monotonic time.
    writes: list[tuple[float, float, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        conn = await connect(self.url, server_settings={"lock_timeout": "60000"})
        rng = random.Random(7)
        n = 0
        try:
            while not self._stop.is_set():
                table, statement, args = _WRITES[n % len(_WRITES)]
                started = time.monotonic()
                try:
                    await conn.execute(statement, *args(rng.randrange(1 << 30)))
                except asyncpg.PostgresError as exc:
                    self.errors.append(f"{table}: {type(exc).__name__}")
                self.writes.append((started, time.monotonic() - started, table))
                n += 1
                # Dispatcher-like pacing: a write every few milliseconds, not a busy loop.
                await asyncio.sleep(0.005)
        finally:
            await conn.close()

    def stop(self) -> None:
        self._stop.set()

    def longest(self, start: float, end: float) -> tuple[float, str]:
        """The longest write that overlapped [start, end], and its table."""
        during = [(took, t) for at, took, t in self.writes if at <= end and at + took >= start]
        return max(during, default=(0.0, "-"))


@dataclass(frozen=True)
class Measured:
    migration: str
    seconds: float
    longest_write: float
    table: str


async def apply_each(
    url: str, directory: Path, migrations: Sequence[Migration], writer: Writer
) -> list[Measured]:
    """Apply ``migrations`` one at a time (each copied into ``directory``, which holds those
    already applied) while ``writer`` writes; the longest write during each."""
    measured: list[Measured] = []
    for m in migrations:
        (directory / m.name).write_text(m.sql, encoding="utf-8")
        start = time.monotonic()
        await migrate(url, directory, lock_timeout_seconds=60)
        end = time.monotonic()
        # The write in flight when the migration ended is counted to its own end.
        await asyncio.sleep(0.2)
        took, table = writer.longest(start, end)
        measured.append(Measured(m.name, end - start, took, table))
    return measured


def baseline_copy(directory: Path, baseline: int = BASELINE) -> list[Migration]:
    """Copy the migrations up to ``baseline`` into ``directory``; those above it, in order."""
    later: list[Migration] = []
    for m in discover(MIGRATIONS_DIR):
        if m.version <= baseline:
            shutil.copy(MIGRATIONS_DIR / m.name, directory / m.name)
        else:
            later.append(m)
    return later


def replays(numbers: Sequence[int] = (24, 26, 28), concurrently: bool = False) -> list[Migration]:
    """The index builds of released migrations ``numbers`` on existing tables, renamed (the
    originals exist after the baseline), as migrations numbered from 9001: plain as released,
    or with ``concurrently`` as the rule writes them."""
    released = {m.version: m for m in discover(MIGRATIONS_DIR)}
    out: list[Migration] = []
    for i, number in enumerate(numbers):
        source = released[number]
        builds = [
            s for s in migration_steps.split(source.sql) if migration_steps.blocking_index_builds(s)
        ]
        renamed = [
            re.sub(
                r"INDEX\s+(\w+)",
                (lambda m: f"INDEX CONCURRENTLY IF NOT EXISTS replay_c_{m.group(1)}")
                if concurrently
                else (lambda m: f"INDEX replay_{m.group(1)}"),
                s,
                count=1,
            )
            for s in builds
        ]
        header = "-- migrate: no-transaction\n" if concurrently else ""
        kind = "concurrently" if concurrently else "plain"
        name = f"{9001 + i + (10 if concurrently else 0):04d}_replay_{number:04d}_{kind}.sql"
        out.append(Migration(int(name[:4]), name, header + "\n".join(renamed) + "\n"))
    return out


@dataclass(frozen=True)
class Run:
    rows: list[Measured]
    writes: int
    # Writes that failed (a lock_timeout would show here).
    errors: list[str]


async def measure(url: str, directory: Path, migrations: Sequence[Migration]) -> Run:
    """``migrations`` applied one by one under the writer (``url`` already at the baseline,
    filled)."""
    writer = Writer(url)
    task = asyncio.create_task(writer.run())
    try:
        await asyncio.sleep(0.5)  # the writer is writing before the first migration
        rows = await apply_each(url, directory, migrations, writer)
    finally:
        writer.stop()
        await task
    return Run(rows, len(writer.writes), writer.errors)


def table(rows: Sequence[Measured]) -> str:
    lines = [f"{'migration':<44} {'took s':>7} {'longest write s':>16}  table"]
    lines += [
        f"{r.migration:<44} {r.seconds:>7.2f} {r.longest_write:>16.3f}  {r.table}" for r in rows
    ]
    return "\n".join(lines)


async def _main() -> None:
    import os
    import tempfile

    from devkit import database

    admin = os.environ.get("DATABASE_URL", "postgresql://reminders@127.0.0.1:55432/reminders")
    name = f"waits_{uuid.uuid4().hex[:8]}"
    async with database.scratch_database(admin, name, migrated=False, timeout=30) as url:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            later = baseline_copy(directory)
            await migrate(url, directory)
            began = time.monotonic()
            await fill(url)
            print(f"filled in {time.monotonic() - began:.1f} s: {ROWS}")
            run = await measure(url, directory, [*later, *replays(), *replays(concurrently=True)])
            print(table(run.rows))
            print(f"{run.writes} writes, failed: {run.errors or 'none'}")


if __name__ == "__main__":
    asyncio.run(_main())

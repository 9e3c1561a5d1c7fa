"""A rolling upgrade from the last release (devkit/releases.py) under calendar load: the old
release migrates and runs a worker; the new code migrates while it runs (a pre-upgrade hook
does), a new worker joins, the old one is stopped mid-load; every reminder on the topic once,
none lost, none that a newer Version removed. Input through a plain producer, output read
from the topic."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from devkit import releases
from devkit.loads.calendar_load import CalendarLoad, expected_reminders, run_load
from devkit.loads.reminder_audit import DUE_TOPIC, audit, read_to_end
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env

pytestmark = pytest.mark.e2e

EVENTS_TOPIC = "pin.calendar.events.v1"
LOAD_SECONDS = 45
SEED = 51


async def streams(root: Path, env: dict[str, str], *args: str) -> str:
    """``python -m streams ARGS`` from the source tree ``root``; fails on a non-zero exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "streams",
        *args,
        cwd=root,
        env={**os.environ, **env, "PYTHONPATH": str(root)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, (
        f"streams {' '.join(args)} ({root}) exited {proc.returncode}:\n{text}"
    )
    return text


async def migrations(db: str) -> list[str]:
    conn = await asyncpg.connect(db)
    try:
        rows = await conn.fetch("SELECT version FROM ops.schema_migrations ORDER BY version")
        return [str(r["version"]) for r in rows]
    finally:
        await conn.close()


def test_the_previous_release_is_the_tagged_one() -> None:
    tagged = releases.tagged_commit(releases.PREVIOUS)
    # A clone without tags still has the commit; one with the tag must agree with it.
    assert tagged in (None, releases.PREVIOUS.commit), (releases.PREVIOUS, tagged)
    assert releases.git("cat-file", "-t", releases.PREVIOUS.commit) == "commit"


@pytest.mark.timeout(600)
async def test_a_rolling_upgrade_under_load_sends_every_reminder_once(
    empty_database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    old_root = releases.extract(releases.PREVIOUS, tmp_path / "previous-release")
    new_root = releases.ROOT
    env = worker_env(empty_database_url, kafka_bootstrap, topic_prefix)
    await streams(old_root, env, "migrate")
    await streams(old_root, env, "topics")
    before = await migrations(empty_database_url)

    old = WorkerProcess({**env, "PYTHONPATH": str(old_root)}, tmp_path, "old", root=old_root)
    new = WorkerProcess(env, tmp_path, "new")
    load = CalendarLoad(seed=SEED, rate=4.0, change_window=20.0, margin=60.0, reverts=0.1)
    try:
        old.start()
        old_health = await old.wait_ready(timeout=120)
        producing = asyncio.create_task(
            run_load(load, kafka_bootstrap, topic_prefix + EVENTS_TOPIC, seconds=LOAD_SECONDS)
        )
        await eventually(
            lambda: load.stats.acked, until=lambda n: n >= 40, timeout=60, what="40 acked"
        )
        # The new code's migrations run while the old worker works (a pre-upgrade hook).
        await streams(new_root, env, "migrate")
        await streams(new_root, env, "topics")
        after = await migrations(empty_database_url)
        new.start()
        new_health = await new.wait_ready(timeout=120)
        # Each runs its own tree: the previous release has no database clock check.
        assert "clock" not in old_health and new_health["clock"] == "ok", (old_health, new_health)
        await eventually(
            lambda: load.stats.acked, until=lambda n: n >= 120, timeout=60, what="120 acked"
        )
        assert old.stop() == 0, old.tail()  # stopped mid-load, as a rolling update does
        await producing
        expectation = expected_reminders(load.acked)
        wait = (expectation.last_due() - datetime.now(UTC)).total_seconds() + 90
        conn = await asyncpg.connect(empty_database_url)
        try:

            async def outstanding() -> int:
                sent = await conn.fetchval(
                    "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
                )
                unpublished = await conn.fetchval(
                    "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL"
                )
                return max(0, len(expectation.expected) - int(sent)) + int(unpublished)

            await eventually(
                outstanding,
                until=lambda n: n == 0,
                timeout=max(wait, 90),
                interval=1.0,
                what="every expected reminder Sent and published",
            )
        finally:
            await conn.close()
    finally:
        old.stop()
        new.stop()
    records = await read_to_end(kafka_bootstrap, topic_prefix + DUE_TOPIC)
    report = audit(records, expectation.expected, expectation.forbidden)
    print(
        f"upgrade {releases.PREVIOUS.tag} -> this tree: migrations {len(before)} -> {len(after)}; "
        f"{load.stats.acked} messages; expected {report.expected}, published {report.published}, "
        f"lost {len(report.lost)}, doubled {report.duplicated_effects}, "
        f"unexpected {dict(report.unexpected)}, re-published {report.republishes}"
    )
    assert len(after) >= len(before) > 0
    assert expectation.expected, "the load made no reminders"
    assert report.lost == [], report.lost[:10]
    assert report.duplicated_effects == 0, report.duplicated[:10]
    assert not report.unexpected, report.unexpected_items[:10]
    assert report.published == report.expected

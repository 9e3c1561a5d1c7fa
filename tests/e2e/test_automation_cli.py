"""``python -m streams automation ...`` as an operator runs it, against a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest

from devkit.workers import ROOT

pytestmark = pytest.mark.e2e


def cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", "automation", *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_ensure_show_hold_release_retry_key_and_deactivate(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    setting, source, sub, run = (str(uuid.uuid4()) for _ in range(4))
    spec = tmp_path / "rows.json"
    spec.write_text(
        json.dumps(
            [
                {
                    "TriggerType": "DateBased",
                    "ScheduledOn": "2026-12-01T09:00:00+01:00",
                    "ScheduledLocalDate": "2026-12-01",
                    "TimeZoneId": "Europe/Paris",
                    "SettingGuid": setting,
                    "SourceType": "PoliceVetting",
                    "SourceGuid": source,
                    "TriggerKey": "ExpiresOn",
                    "TargetDate": "2026-12-31",
                    "OffsetDays": 30,
                },
                {
                    "TriggerType": "ManualRun",
                    "ScheduledOn": "2026-12-01T08:00:00Z",
                    "SubscriptionGuid": sub,
                    "ManualRunGuid": run,
                },
            ]
        )
    )
    first = cli(database_url, "ensure", "--json", str(spec), "--format", "json")
    assert first.returncode == 0, first.stderr
    results = {r["SchedulerKey"]: r for r in json.loads(first.stdout)}
    reminder_key = f"reminder:{setting}:PoliceVetting:{source}:ExpiresOn:2026-12-31:30"
    manual_key = f"report-subscription:{sub}:manual:{run}"
    assert {k: r["Outcome"] for k, r in results.items()} == {
        reminder_key: "Inserted",
        manual_key: "Inserted",
    }
    again = cli(database_url, "ensure", "--json", str(spec))
    assert again.returncode == 0 and again.stdout.count("Unchanged") == 2, again.stdout

    shown = cli(database_url, "show", reminder_key)
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert (view["status"], view["scheduled_on"], view["on_hold"]) == (
        "Pending",
        "2026-12-01T08:00:00+00:00",
        False,
    )

    await pool.execute(
        "UPDATE automation.scheduler SET status_id = 'Failed', is_on_support_hold = true, "
        "retry_count = 4, failure_reason_code = 'HandlerError', last_error = 'RuntimeError' "
        "WHERE scheduler_key = ANY($1::text[])",
        [reminder_key, manual_key],
    )
    held = cli(database_url, "hold")
    assert held.returncode == 0 and "2 row(s) on hold" in held.stdout, held.stdout
    assert "HandlerError" in held.stdout and "attempts=4" in held.stdout

    released = cli(database_url, "release", reminder_key)
    assert released.returncode == 0, released.stderr
    assert "is Pending, attempts 4, support actions 1" in released.stdout
    r = await pool.fetchrow(
        "SELECT status_id, is_on_support_hold, support_action, retry_count "
        "FROM automation.scheduler WHERE scheduler_key = $1",
        reminder_key,
    )
    assert tuple(r) == ("Pending", False, "release", 4)
    not_held = cli(database_url, "release", reminder_key)
    assert not_held.returncode == 1 and "no row on support hold" in not_held.stderr

    retried = cli(database_url, "retry-key", manual_key)
    assert retried.returncode == 0 and "attempts 0" in retried.stdout, retried.stdout

    gone = cli(database_url, "deactivate", reminder_key, "--reason", "SourceNoLongerValid")
    assert gone.returncode == 0 and "deactivated" in gone.stdout
    assert (
        await pool.fetchval(
            "SELECT status_reason_code FROM automation.scheduler WHERE scheduler_key = $1",
            reminder_key,
        )
        == "SourceNoLongerValid"
    )


def test_bad_input_is_refused_with_the_field_named(database_url: str, tmp_path: Path) -> None:
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps({"TriggerType": "DateBased", "ScheduledOn": "2026-12-01T09:00Z"}))
    bad = cli(database_url, "ensure", "--json", str(spec))
    assert bad.returncode == 2
    assert "SettingGuid" in bad.stderr and "Traceback" not in bad.stderr
    missing = cli(database_url, "show", "reminder:nope")
    assert missing.returncode == 1
    usage = cli(database_url, "frobnicate")
    assert usage.returncode == 2


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"AUTOMATION_LEASE_SECONDS": "5"}, "AUTOMATION_LEASE_SECONDS"),
        ({"AUTOMATION_BACKOFF_SECONDS": "5m,1h"}, "AUTOMATION_BACKOFF_SECONDS"),
        ({"AUTOMATION_BATCH_SIZE": "0"}, "AUTOMATION_BATCH_SIZE"),
        (
            {"TIMER_AUTOMATION_STALE_CLEANUP_INTERVAL_SECONDS": "abc"},
            "TIMER_AUTOMATION_STALE_CLEANUP_INTERVAL_SECONDS",
        ),
    ],
)
def test_bad_automation_settings_stop_the_worker_naming_the_setting(
    tmp_path: Path, env: dict[str, str], setting: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "streams", "worker"],
        cwd=ROOT,
        env={**os.environ, **env, "WORKER_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert setting in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]

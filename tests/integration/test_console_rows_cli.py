"""``python -m streams rows list|show`` on real PostgreSQL, as an operator runs it: a readable
table with the next cursor, the pages followed to the end, the JSON of the web pages, a row's
detail, and exit 2 naming the parameter of a bad value (1 for a row that does not exist)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import asyncpg
import pytest

from devkit.harness import console as seed
from devkit.workers import ROOT

pytestmark = pytest.mark.integration


def rows_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", "rows", *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_list_follows_the_cursor_to_the_end_and_show_prints_the_row(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        s = await seed.calendar_rows(conn, per_state=3)
        sent = s.reminders["Sent"]
        await seed.outbox(conn, str(s.events[sent[0]]), {"ReminderId": str(sent[0])})
    seen: list[str] = []
    after: list[str] = []
    while True:
        out = rows_cli(database_url, "list", "calendar/reminders", "--state", "Sent",
                       "--limit", "2", *after)  # fmt: skip
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].split()[:3] == ["reminder_id", "due_at", "status"]
        seen += [line.split()[0] for line in lines[1:] if line.split()[0].count("-") == 4]
        last = lines[-1]
        if last == "next: none (last page)":
            break
        assert last.startswith("next: --after ")
        after = ["--after", last.removeprefix("next: --after ")]
    assert seen == [str(r) for r in sent]

    out = rows_cli(database_url, "list", "calendar/reminders", "--state", "Sent", "--json",
                   "--tenant", str(seed.TENANT_A), "--owner", str(seed.OWNER_A))  # fmt: skip
    assert out.returncode == 0, out.stderr
    page = json.loads(out.stdout)
    assert page["ids"] == [str(r) for r in sent if r in s.tenant_a]
    assert page["next"] is None

    out = rows_cli(database_url, "show", "calendar/reminders", str(sent[0]))
    assert out.returncode == 0, out.stderr
    assert f"Calendar reminders: {sent[0]}" in out.stdout
    assert "waiting" in out.stdout  # its outbox record, not published yet
    detail = json.loads(rows_cli(database_url, "show", "calendar/reminders", str(sent[0]),
                                 "--json").stdout)  # fmt: skip
    assert [r["delivery"] for r in detail["outbox"]] == ["waiting"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["list", "calendar/reminders", "--state", "Lost"], "state: "),
        (["list", "calendar/reminders", "--from", "last week"], "from: "),
        (["list", "calendar/reminders", "--bu", str(seed.BU)], "bu: "),
        (["list", "automation/scheduler", "--limit", "9999"], "limit: "),
        (["list", "calendar/nothing"], "no listing 'calendar/nothing'"),
        (["show", "automation/scheduler", "not-a-number"], "id: "),
    ],
)
def test_bad_values_exit_2_naming_the_parameter(
    database_url: str, args: list[str], named: str
) -> None:
    out = rows_cli(database_url, *args)
    assert out.returncode == 2, out
    assert out.stderr.startswith(f"error: {named}"), out.stderr


def test_a_row_that_does_not_exist_exits_1(database_url: str) -> None:
    out = rows_cli(database_url, "show", "automation/scheduler", "12345")
    assert out.returncode == 1
    assert "no row '12345' in automation/scheduler" in out.stderr

"""The console's listings on real PostgreSQL: keyset pages in order with no duplicate and no gap
while rows are inserted between pages, each filter, bad values refused naming the parameter,
counts by state, and a row's detail with its outbox records published, waiting or parked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from devkit.harness import console as seed
from devkit.harness.calendar import make_runtime
from streams.console import rows
from streams.console.listing import FilterError
from streams.runtime import Runtime

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


async def all_pages(rt: Runtime, name: str, **params: str) -> list[list[str]]:
    listing, pages, after = rows.find(name), [], None
    while True:
        data = await rows.page(rt, listing, {**params, **({"after": after} if after else {})})
        pages.append(data["ids"])
        after = data["next"]
        if after is None:
            return pages


async def test_pages_follow_the_keyset_with_no_duplicate_or_gap_while_rows_arrive(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        s = await seed.calendar_rows(conn, per_state=7)
        event_id = s.events[s.reminders["Pending"][0]]
    listing = rows.find("calendar/reminders")
    seen: list[str] = []
    early: list[str] = []
    late: list[str] = []
    after = None
    while True:
        data = await rows.page(
            runtime,
            listing,
            {"state": "Pending", "limit": "3", **({"after": after} if after else {})},
        )
        seen += data["ids"]
        # Between pages: one row due before everything (behind the cursor, not on a later page
        # of this pass) and one due after everything (ahead of it: on a later page).
        async with pool.acquire() as conn:
            before = seed.T0 - timedelta(days=1, minutes=len(early))
            early.append(str(await seed.reminder(conn, event_id, before)))
            if len(late) < 2:
                ahead = seed.T0 + timedelta(days=1, minutes=len(late))
                late.append(str(await seed.reminder(conn, event_id, ahead)))
        after = data["next"]
        if after is None:
            break
    pending = [str(r) for r in s.reminders["Pending"] + s.reminders["Retrying"]]
    assert len(seen) == len(set(seen)), "a row came twice"
    assert set(pending) <= set(seen), f"rows missing: {set(pending) - set(seen)}"
    assert set(late) <= set(seen), "rows inserted ahead of the cursor are on a later page"
    assert not set(early) & set(seen), "rows behind the cursor do not appear in this pass"
    # The order is (due_at, reminder_id): read back the times of what was shown.
    async with pool.acquire() as conn:
        keys = await conn.fetch(
            "SELECT reminder_id::text AS id, due_at FROM calendar.event_reminders "
            "WHERE reminder_id::text = ANY($1)",
            seen,
        )
    by_id = {r["id"]: (r["due_at"], r["id"]) for r in keys}
    assert [by_id[i] for i in seen] == sorted(by_id[i] for i in seen)


async def test_each_state_and_filter_of_calendar_reminders(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        s = await seed.calendar_rows(conn, per_state=4)
    listing = rows.find("calendar/reminders")

    async def ids(**params: str) -> list[str]:
        return (await rows.page(runtime, listing, params))["ids"]

    assert await ids() == [str(r) for r in s.reminders["Pending"] + s.reminders["Retrying"]]
    assert await ids(state="Retrying") == [str(r) for r in s.reminders["Retrying"]]
    assert await ids(state="Sent") == [str(r) for r in s.reminders["Sent"]]
    assert await ids(state="Skipped") == [str(r) for r in s.reminders["Skipped"]]
    sent_a = [str(r) for r in s.reminders["Sent"] if r in s.tenant_a]
    assert await ids(state="Sent", tenant=str(seed.TENANT_A), owner=str(seed.OWNER_A)) == sent_a
    assert await ids(state="Sent", tenant=str(seed.TENANT_A), owner=str(seed.OWNER_B)) == []
    assert await ids(state="Retrying", owner=str(seed.OWNER_A)) == [
        str(r) for r in s.reminders["Retrying"] if r in s.tenant_a
    ]
    assert await ids(state="Sent", owner=str(seed.OWNER_A)) == sent_a
    assert await ids(state="Sent", owner=str(seed.OWNER_B)) == [
        str(r) for r in s.reminders["Sent"] if r not in s.tenant_a
    ]
    # Pending rows are due T0+1..4 min, retrying T0+5..6: the window [T0+2, T0+4) holds 2.
    window = {"from": (seed.T0 + timedelta(minutes=2)).isoformat()}
    window["to"] = (seed.T0 + timedelta(minutes=4)).isoformat()
    assert await ids(**window) == [str(r) for r in s.reminders["Pending"][1:3]]
    counts = {x["name"]: x["states"] for x in (await rows.index(runtime))["listings"]}
    assert counts["calendar/reminders"] == {"Pending": 6, "Retrying": 2, "Sent": 4, "Skipped": 4}


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"state": "Lost"}, "state"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-12-02", "to": "2026-12-01"}, "to"),
        ({"tenant": "not-a-uuid"}, "tenant"),
        ({"tenant": "aaaaaaaa-0000-4000-8000-000000000001"}, "tenant"),  # no index alone
        ({"bu": "cccccccc-0000-4000-8000-000000000003"}, "bu"),
        ({"after": "garbage!"}, "after"),
        ({"limit": "0"}, "limit"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_bad_filter_values_are_refused_naming_the_parameter(
    runtime: Runtime, params: dict[str, str], param: str
) -> None:
    with pytest.raises(FilterError) as refused:
        await rows.page(runtime, rows.find("calendar/reminders"), params)
    assert refused.value.param == param
    assert str(refused.value).startswith(f"{param}: ")


async def test_reminder_detail_with_its_outbox_records_published_waiting_and_parked(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        s = await seed.calendar_rows(conn, per_state=2)
        sent, retrying = s.reminders["Sent"][0], s.reminders["Retrying"][0]
        key = str(s.events[sent])
        published = await seed.outbox(conn, key, {"ReminderId": str(sent)}, published=True)
        waiting = await seed.outbox(conn, key, {"ReminderId": str(sent)})
        parked = await seed.outbox(conn, key, {"ReminderId": str(sent)}, parked="TooLarge")
        await seed.outbox(conn, key, {"ReminderId": "someone-else"}, published=True)
    listing = rows.find("calendar/reminders")
    found = await rows.detail(runtime, listing, str(sent))
    assert found is not None
    assert found["row"]["status"] == "Sent"
    assert found["lineage"]["kind"] == "calendar reminder"
    assert {r["outbox_id"]: r["delivery"] for r in found["outbox"]} == {
        published: "published",
        waiting: "waiting",
        parked: "parked",
    }
    poison = await rows.detail(runtime, listing, str(retrying))
    assert poison is not None
    assert (poison["attempts"], poison["last_error"], poison["outbox"]) == (
        3,
        "InvalidReminder",
        [],
    )
    assert await rows.detail(runtime, listing, "00000000-0000-4000-8000-000000000000") is None
    with pytest.raises(FilterError) as refused:
        await rows.detail(runtime, listing, "42")
    assert refused.value.param == "id"


async def test_scheduler_rows_by_status_hold_key_prefix_and_business_unit(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        guid = await seed.setting(conn, seed.BU)
        made: dict[str, Any] = {}
        for i, (key, status) in enumerate(
            [
                ("R:a:1", "Pending"),
                ("R:a:2", "Pending"),
                ("R:b:1", "Pending"),
                ("R:a:3", "Completed"),
                ("R:b:2", "Failed"),
            ]
        ):
            made[key] = await seed.scheduler_row(
                conn,
                key,
                seed.T0 + timedelta(hours=i),
                status,
                setting=guid if key.startswith("R:a") else None,
                on_hold=status == "Failed",
            )
        await seed.outbox(conn, "R:a:3", {"SchedulerKey": "R:a:3"}, published=True)
    listing = rows.find("automation/scheduler")

    async def keys(**params: str) -> list[str]:
        data = await rows.page(runtime, listing, params)
        return [r["scheduler_key"] for r in data["rows"]]

    assert await keys() == ["R:a:1", "R:a:2", "R:b:1"]
    assert await keys(state="Pending", key_prefix="R:b") == ["R:b:1"]
    assert await keys(state="Pending", bu=str(seed.BU)) == ["R:a:1", "R:a:2"]
    assert await keys(state="OnHold") == ["R:b:2"]
    assert await keys(state="Completed") == ["R:a:3"]
    pages = await all_pages(runtime, "automation/scheduler", limit="1")
    assert pages == [[str(made["R:a:1"])], [str(made["R:a:2"])], [str(made["R:b:1"])]]
    found = await rows.detail(runtime, listing, str(made["R:a:3"]))
    assert found is not None
    assert [r["delivery"] for r in found["outbox"]] == ["published"]
    held = await rows.detail(runtime, listing, str(made["R:b:2"]))
    assert held is not None
    assert (held["attempts"], held["last_error"], held["outbox"]) == (5, "boom", [])
    counts = {x["name"]: x["states"] for x in (await rows.index(runtime))["listings"]}
    assert counts["automation/scheduler"]["Pending"] == 3
    assert counts["automation/scheduler"]["OnHold"] == 1


async def test_expiry_markers_by_owner_and_runs_newest_first_by_state(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        a1, doc = await seed.marker(conn, seed.OWNER_A, seed.T0)
        b1, _ = await seed.marker(conn, seed.OWNER_B, seed.T0 + timedelta(minutes=1))
        a2, _ = await seed.marker(conn, seed.OWNER_A, seed.T0 + timedelta(minutes=2))
        payload = {"Documents": [{"DocumentId": str(doc), "ThresholdDays": 30}]}
        await seed.outbox(conn, str(seed.OWNER_A), payload)
        for day in range(3):
            await seed.run(conn, f"run-{day}", seed.T0 + timedelta(days=day), finished=day != 2)
        await seed.run(conn, "run-failed", seed.T0 + timedelta(hours=5), finished=True, failed=1)
    markers = rows.find("profile/expiry-markers")
    assert (await rows.page(runtime, markers, {}))["ids"] == [str(a1), str(b1), str(a2)]
    mine = await rows.page(runtime, markers, {"owner": str(seed.OWNER_A), "limit": "1"})
    assert mine["ids"] == [str(a1)]
    rest = await rows.page(runtime, markers, {"owner": str(seed.OWNER_A), "after": mine["next"]})
    assert (rest["ids"], rest["next"]) == ([str(a2)], None)
    found = await rows.detail(runtime, markers, str(a1))
    assert found is not None
    assert [r["delivery"] for r in found["outbox"]] == ["waiting"]
    assert await all_pages(runtime, "profile/expiry-runs", limit="1") == [["run-1"], ["run-0"]]
    assert (await rows.page(runtime, rows.find("profile/expiry-runs"), {"state": "Unfinished"}))[
        "ids"
    ] == ["run-2"]
    since = {"from": (seed.T0 + timedelta(hours=1)).isoformat(), "state": "WithFailures"}
    assert (await rows.page(runtime, rows.find("profile/expiry-runs"), since))["ids"] == [
        "run-failed"
    ]
    with pytest.raises(FilterError) as refused:
        await rows.page(runtime, rows.find("profile/expiry-runs"), {"owner": str(seed.OWNER_A)})
    assert refused.value.param == "owner"

"""Timer registry on virtual time: list(), metrics, disabled schedules, slot pruning."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from devkit.harness.timers import (
    T0,
    Recorder,
    World,
    at,
    sched,
)
from streams.maintenance import SlotPruner
from streams.timers import (
    Misfire,
    Mode,
    RunRecord,
)
from streams.timers.context import RunContext


@dataclass(frozen=True)
class DispatchResult:
    sent: int
    at: datetime


class WithSummary:
    def summary(self) -> dict[str, int]:
        return {"rows": 3}


class Returns:
    def __init__(self, value: object) -> None:
        self.value = value

    async def run_once(self, ctx: RunContext) -> object:
        return self.value


async def test_list_is_json_able_and_complete(world: World) -> None:
    reg = world.registry(env={"TIMER_OFF_ENABLED": "false"})
    reg.register(sched(Returns(DispatchResult(2, T0)), name="dispatch"))
    reg.register(sched(Returns(WithSummary()), name="summary", mode=Mode.CLUSTER_ONCE))
    reg.register(
        sched(
            Returns(object()),
            name="daily",
            interval=None,
            cron="0 3 * * *",
            timezone="Europe/Berlin",
            mode=Mode.CLUSTER_ONCE,
            misfire=Misfire.CATCH_UP,
            catch_up_window=timedelta(days=2),
        )
    )
    reg.register(sched(Recorder(), name="off", settings_prefix="TIMER_OFF_"))
    await reg.run_due()
    world.clock.set(at(1))
    await reg.run_due()
    rows = {row["name"]: row for row in json.loads(json.dumps(reg.list()))}
    assert set(rows) == {"dispatch", "summary", "daily", "off"}
    dispatch = rows["dispatch"]
    assert dispatch["mode"] == "every_instance"
    assert dispatch["interval_seconds"] == 60
    assert dispatch["next_fire_at"] == "2025-01-06T12:02:00Z"
    assert dispatch["last_slot"] == "2025-01-06T12:01:00Z"
    assert dispatch["last_started_at"] == "2025-01-06T12:01:00Z"
    assert dispatch["last_duration_seconds"] == 0
    assert dispatch["last_result"] == "ok"
    assert dispatch["last_summary"] == {"sent": 2, "at": "2025-01-06 12:00:00+00:00"}
    assert dispatch["counts"] == {
        "runs": 1,
        "failed": 0,
        "timed_out": 0,
        "cancelled": 0,
        "skipped_overlap": 0,
        "deduped": 0,
        "missed": 0,
        "wakes": 0,
        "claim_retries": 0,
        "reclaimed": 0,
        "lease_lost": 0,
        "retries": 0,
        "handed_back": 0,
        "given_up": 0,
        "paused": 0,
    }
    assert rows["summary"]["last_summary"] == {"rows": 3}
    daily = rows["daily"]
    assert (daily["cron"], daily["timezone"], daily["misfire"]) == (
        "0 3 * * *",
        "Europe/Berlin",
        "catch_up",
    )
    assert daily["next_fire_at"] == "2025-01-07T02:00:00Z"
    assert daily["last_result"] is None
    assert rows["off"]["enabled"] is False
    assert rows["off"]["next_fire_at"] is None


async def test_metrics_series_exist_from_registration(world: World) -> None:
    reg = world.registry()
    reg.register(sched(Recorder()))
    for result in ("ok", "failed", "timeout", "cancelled"):
        assert (
            world.prom.get_sample_value(
                "reminders_timer_runs_total", {"schedule": "job", "result": result}
            )
            == 0
        )
    assert (
        world.prom.get_sample_value("reminders_timer_overlap_skips_total", {"schedule": "job"}) == 0
    )


async def test_disabled_schedules_do_not_run(world: World) -> None:
    rec = Recorder()
    reg = world.registry(env={"TIMER_JOB_ENABLED": "0"})
    reg.register(sched(rec, settings_prefix="TIMER_JOB_"))
    await reg.start()
    try:
        await world.sleeper.advance_to(at(3))
    finally:
        await reg.stop(timeout=0)
    assert rec.calls == []


async def test_slot_pruner_deletes_old_claims(world: World) -> None:
    for k in range(5):
        await world.store.claim_slot("job", at(k), "w", f"r{k}")
    pruner = SlotPruner(world.store, retention=timedelta(minutes=2), batch=2)
    result = await pruner.run_once(RunContext.at(at(4), clock=world.clock))
    assert result.deleted == 2
    assert sorted(s for _, s in world.store.claims) == [at(2), at(3), at(4)]


def test_run_records_are_plain_data() -> None:
    record = RunRecord("job", "r1", "on_time", T0, T0, "ok")
    assert record.summary is None and record.error is None

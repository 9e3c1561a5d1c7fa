"""``python -m streams automation <command>``: support commands and Ensure by hand.

ensure --json FILE [--format json]   Ensure the rows FILE describes (a JSON object or list,
                                     PascalCase: TriggerType, ScheduledOn and the inputs
                                     of that trigger); keys and hashes are built here
deactivate KEY... --reason CODE      Pending/Failed rows → Deactivated with a ReasonCode
show KEY                             one row (identifiers, status, diagnostics)
hold [--limit N]                     rows on support hold
release KEY                          lift a hold: one more attempt, attempts kept
retry-key KEY                        lift a hold: retry the key from a fresh ladder
fanouts [--limit N]                  unfinished setting fan-outs; parked ones with reasons
fanout-release SETTING_GUID...       parked fan-outs go on from where they stopped
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_pascal

from db import fanout_progress as fanout_repo
from db import scheduler as repo
from db.connector import DatabaseUnavailable, InputRejected, connection, create_pool, transaction
from streams.contracts.automation import FiringPolicy, TriggerType
from streams.domain.automation.recurring import ReminderRecurringInput
from streams.domain.automation.rules import (
    AutomationInput,
    ReminderDateInput,
    ReminderThresholdInput,
    ReportManualInput,
    ReportScheduledInput,
    SchedulerCandidate,
)
from streams.metrics import Metrics
from streams.settings import Settings
from streams.slices.automation.metrics import AutomationMetrics
from streams.slices.automation.rows import SchedulerRows
from streams.slices.automation.support import SupportAction, put_back, row_view


class CandidateSpec(BaseModel):
    """One row to Ensure, as written in the --json file."""

    model_config = ConfigDict(alias_generator=to_pascal, extra="forbid", frozen=True)

    trigger_type: TriggerType
    scheduled_on: AwareDatetime
    scheduled_local_date: date | None = None
    time_zone_id: str | None = None
    setting_guid: UUID | None = None
    source_type: str | None = None
    source_guid: UUID | None = None
    trigger_key: str | None = None
    target_date: date | None = None
    offset_days: int | None = None
    metric_key: str | None = None
    threshold_value: float | None = None
    firing_policy: FiringPolicy | None = None
    scope_key: str | None = None
    subscription_guid: UUID | None = None
    period_start: AwareDatetime | None = None
    manual_run_guid: UUID | None = None

    def need(self, *names: str) -> list[Any]:
        missing = [n for n in names if getattr(self, n) is None]
        if missing:
            wanted = ", ".join(to_pascal(n) for n in missing)
            raise ValueError(f"{self.trigger_type.value} needs {wanted}")
        return [getattr(self, n) for n in names]

    def candidate(self) -> SchedulerCandidate:
        build = _BUILDERS.get(self.trigger_type)
        if build is None:
            raise ValueError(f"no SchedulerKey format for TriggerType {self.trigger_type.value}")
        return SchedulerCandidate(
            build(self), self.scheduled_on, self.scheduled_local_date, self.time_zone_id
        )


_REMINDER = ("setting_guid", "source_type", "source_guid", "trigger_key")
_BUILDERS: dict[TriggerType, Callable[[CandidateSpec], AutomationInput]] = {
    TriggerType.DATE_BASED: lambda s: ReminderDateInput(
        *s.need(*_REMINDER, "target_date", "offset_days")
    ),
    # One occurrence of a recurring date: TargetDate is the occurrence (the key's date).
    TriggerType.RECURRING: lambda s: ReminderRecurringInput(
        *s.need(*_REMINDER, "target_date", "offset_days")
    ),
    TriggerType.THRESHOLD_CONDITION: lambda s: ReminderThresholdInput(
        *s.need(*_REMINDER, "metric_key", "threshold_value", "firing_policy", "scope_key")
    ),
    TriggerType.SCHEDULED_RUN: lambda s: ReportScheduledInput(
        *s.need("subscription_guid", "period_start")
    ),
    TriggerType.MANUAL_RUN: lambda s: ReportManualInput(
        *s.need("subscription_guid", "manual_run_guid")
    ),
}


def load_candidates(path: Path) -> list[SchedulerCandidate]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for i, item in enumerate(items):
        try:
            out.append(CandidateSpec.model_validate(item, by_alias=True).candidate())
        except (ValidationError, ValueError) as exc:
            raise ValueError(f"{path} item {i}: {exc}") from None
    return out


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``automation ensure|deactivate|show|hold|release|retry-key``."""
    p = sub.add_parser(
        "automation",
        help="scheduler rows by hand and the support commands (rows on hold)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = p.add_subparsers(dest="command", metavar="<command>", required=True)
    e = commands.add_parser("ensure", help="Ensure rows described in a JSON file")
    e.add_argument("--json", required=True, type=Path, dest="file")
    e.add_argument("--format", choices=["text", "json"], default="text")
    d = commands.add_parser("deactivate", help="deactivate rows that no longer hold")
    d.add_argument("keys", nargs="+", metavar="KEY")
    d.add_argument("--reason", required=True, metavar="CODE")
    s = commands.add_parser("show", help="show one row")
    s.add_argument("key", metavar="KEY")
    h = commands.add_parser("hold", help="list rows on support hold")
    h.add_argument("--limit", type=int, default=100, metavar="N")
    for name in ("release", "retry-key"):
        r = commands.add_parser(name, help="put a held row back (audited in ops.console_audit)")
        r.add_argument("key", metavar="KEY")
        r.add_argument("--reason", default="", help="why (audited)")
        r.add_argument("--actor", default=None, help="who (default: $USER)")
    f = commands.add_parser("fanouts", help="unfinished and parked setting fan-outs")
    f.add_argument("--limit", type=int, default=100, metavar="N")
    fr = commands.add_parser("fanout-release", help="parked fan-outs go on where they stopped")
    fr.add_argument("guids", nargs="+", type=UUID, metavar="SETTING_GUID")
    p.set_defaults(run=run_automation)


async def _run(settings: Settings, args: argparse.Namespace) -> int:
    pool = await create_pool(settings.database_url, min_size=1, max_size=2)
    now = datetime.now(UTC)
    try:
        if args.command == "ensure":
            candidates = load_candidates(args.file)
            rows = SchedulerRows(Metrics().family(AutomationMetrics))
            async with transaction(pool) as conn:
                results = await rows.ensure(conn, candidates, now)
            if args.format == "json":
                print(json.dumps([_ensured(r) for r in results]))
            else:
                for r in results:
                    print(f"{r.outcome:<17} {r.status:<11} v{r.version:<4} {r.scheduler_key}")
            return 0
        if args.command == "deactivate":
            rows = SchedulerRows(Metrics().family(AutomationMetrics))
            async with transaction(pool) as conn:
                done = await rows.deactivate(conn, dict.fromkeys(args.keys, args.reason), now)
            for d in done:
                state = "deactivated" if d.changed else f"unchanged ({d.status or 'no such row'})"
                print(f"{state:<24} {d.scheduler_key}")
            return 0
        if args.command == "show":
            async with connection(pool) as conn:
                row = await repo.get_by_key(conn, args.key)
                record = None if row is not None else await repo.history_get(conn, args.key)
            if record is not None:
                # Completed, its row pruned: the record Ensure answers from (never re-sent).
                print(json.dumps({"status_id": "Completed", "pruned": True, **record}, default=str))
                return 0
            if row is None:
                print(f"no row with SchedulerKey {args.key!r}", file=sys.stderr)
                return 1
            print(json.dumps(row_view(row), indent=2))
            return 0
        if args.command == "hold":
            async with connection(pool) as conn:
                held = await repo.list_held(conn, args.limit)
            for h in held:
                print(
                    f"{h.failure_reason_code or '-':<20} attempts={h.retry_count:<3} "
                    f"interruptions={h.interrupted_count:<3} "
                    f"{h.status_id:<11} {h.scheduler_key}  last_error={h.last_error or '-'}"
                )
            print(f"{len(held)} row(s) on hold")
            return 0
        if args.command in ("fanouts", "fanout-release"):
            return await _fanouts(pool, args, now)
        from streams.timers.control import actor_default

        action = SupportAction(args.command)
        put = await put_back(
            pool, args.key, action, now, actor=args.actor or actor_default(), reason=args.reason
        )
        if put is None:
            print(f"no row on support hold with SchedulerKey {args.key!r}", file=sys.stderr)
            return 1
        print(
            f"{action.value}: {put.scheduler_key} is {put.status_id}, attempts {put.retry_count}, "
            f"support actions {put.support_action_count}"
        )
        return 0
    finally:
        await pool.close()


async def _fanouts(pool: Any, args: argparse.Namespace, now: datetime) -> int:
    if args.command == "fanout-release":
        async with transaction(pool) as conn:
            released = set(await fanout_repo.release(conn, args.guids, now))
        for guid in args.guids:
            print(f"{'released' if guid in released else 'not parked':<11} {guid}")
        return 0 if len(released) == len(set(args.guids)) else 1
    async with connection(pool) as conn:
        unfinished, parked = await fanout_repo.counts(conn)
        rows = await fanout_repo.parked(conn, args.limit)
    for p in rows:
        print(
            f"parked {p.setting_guid} chunks={p.chunks} failures={p.failures} "
            f"after={p.after_guid or '-'} reason={p.last_error or '-'}"
        )
    print(f"{unfinished} fan-out(s) in progress, {parked} parked")
    return 0


def _ensured(r: repo.EnsuredRow) -> dict[str, Any]:
    return {
        "SchedulerKey": r.scheduler_key,
        "Outcome": r.outcome,
        "Status": r.status,
        "Version": r.version,
        "RetryCount": r.retry_count,
        "IsOnSupportHold": r.is_on_support_hold,
        "DispatchResult": r.dispatch_result,
    }


def run_automation(settings: Settings, args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(settings, args))
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (DatabaseUnavailable, InputRejected) as exc:
        print(f"error: PostgreSQL (setting DATABASE_URL): {exc}", file=sys.stderr)
        return 1

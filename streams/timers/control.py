"""``streams timers pause NAME --reason ..`` / ``resume NAME`` (a schedule paused on every
worker at runtime, audited) and ``timers backfill NAME --from D1 --to D2`` (each day's slot
through the path of ``timers run NAME --as-of``, in order).

Backfill exit codes: 0 every day ran or had run already (a claimed slot is skipped, as
``timers run`` reports it with 3); 1 a day's run failed (the days after it are not run);
2 a usage problem (unknown name, a range ending in the future, from after to); 4 the job is
paused cluster-wide and ``--ignore-pause`` was not given (no day is run).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from datetime import UTC, date, datetime, time, timedelta

from db import timer_pauses
from db.connector import transaction
from streams.settings import ConfigError, Settings
from streams.slices.slice import TimerContext
from streams.timers import slots
from streams.timers.manual import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PAUSED,
    EXIT_USAGE,
    add_ignore_pause,
    pause_note,
    report,
)
from streams.timers.schedule import RegistrationError

# A backfill covers at most this many days (a typo in a year must not start 10,000 runs).
MAX_BACKFILL_DAYS = 366


def actor_default() -> str:
    """Who a CLI action is recorded as: ``$USER`` (the CLI is trusted: it has the database
    credentials), else the login name."""
    try:
        return os.environ.get("USER") or getpass.getuser()
    except Exception:  # no user database entry (a bare container)
        return "cli"


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for verb, what in (
        ("pause", "pause NAME on every worker now (its runs are skipped until resumed)"),
        ("resume", "resume a paused NAME on every worker"),
    ):
        p = commands.add_parser(
            verb, help=what, description=what + "; recorded in ops.console_audit"
        )
        p.add_argument("name", metavar="NAME", help="a registered timer, e.g. document-expiry")
        p.add_argument("--reason", required=verb == "pause", default="", help="why (audited)")
        p.add_argument("--actor", default=None, help="who (default: $USER)")
        p.set_defaults(run=run_pause, verb=verb)
    backfill = commands.add_parser(
        "backfill",
        help="run NAME's slot of each day from D1 to D2, in order, as timers run --as-of does",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    backfill.add_argument("name", metavar="NAME", help="a daily timer, e.g. document-expiry")
    backfill.add_argument("--from", dest="first", metavar="D1", type=_day, required=True)
    backfill.add_argument("--to", dest="last", metavar="D2", type=_day, required=True)
    add_ignore_pause(backfill)
    backfill.set_defaults(run=run_backfill)


def _context(settings: Settings, name: str) -> TimerContext | None:
    from streams.timer_app import create_timers

    try:
        ctx = create_timers(settings)
    except (ConfigError, RegistrationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if name not in ctx.registry.names:
        known = ", ".join(ctx.registry.names)
        print(f"error: no timer named {name!r} (known: {known})", file=sys.stderr)
        return None
    return ctx


def run_pause(settings: Settings, args: argparse.Namespace) -> int:
    ctx = _context(settings, args.name)
    if ctx is None:
        return EXIT_USAGE
    actor = args.actor or actor_default()

    async def act() -> timer_pauses.ActionOutcome:
        try:
            pool = await ctx.runtime.pool()
            async with transaction(pool) as conn:
                change = timer_pauses.pause if args.verb == "pause" else timer_pauses.resume
                return await change(conn, args.name, actor, args.reason, ctx.runtime.clock.now())
        finally:
            await ctx.runtime.close()

    result = asyncio.run(act())
    if result.outcome == "changed":
        print(
            f"timer {args.name}: {result.state_before} -> {result.state_after} on every worker "
            f"(audit {result.audit_id})"
        )
    else:
        print(f"timer {args.name} is {result.state_before} already: nothing changed")
    return EXIT_OK


def backfill_days(first: date, last: date) -> list[date]:
    """The days of a backfill, oldest first (ValueError for a reversed or too long range)."""
    if last < first:
        raise ValueError(f"--to {last} is before --from {first}")
    count = (last - first).days + 1
    if count > MAX_BACKFILL_DAYS:
        raise ValueError(f"{count} days: a backfill covers at most {MAX_BACKFILL_DAYS}")
    return [first + timedelta(days=i) for i in range(count)]


async def backfill(
    ctx: TimerContext,
    name: str,
    days: list[date],
    out: list[str],
    *,
    ignore_pause: bool = False,
) -> int:
    """Run each day's first slot of ``name`` through ``run_slot`` (the claim, replay and pause
    rules of ``timers run --as-of``); stop at the first that did not end ok or deduped."""
    cadence = ctx.registry.get(name).cadence
    for day in days:
        midnight = datetime.combine(day, time.min, UTC)
        slot = slots.next_fire(cadence, midnight - timedelta(microseconds=1))
        if slot.date() != day:
            out.append(
                f"{day}: no slot of {name} on this day (first after it: {slots.iso_utc(slot)})"
            )
            return EXIT_USAGE
        try:
            record = await ctx.registry.run_slot(name, slot, ignore_pause=ignore_pause)
        except ValueError as exc:  # a future day
            out.append(f"{day}: error: {exc}")
            return EXIT_USAGE
        if record.result == "deduped":
            out.append(f"{day}: already claimed (it ran, or runs, elsewhere): skipped")
            continue
        out.extend(report(record))
        if record.result == "paused":
            out.append(f"backfill stopped at {day}: {name} is paused; no day was run after it")
            return EXIT_PAUSED
        if record.result != "ok":
            out.append(f"backfill stopped at {day}: its run {record.result}; later days not run")
            return EXIT_FAILED
    return EXIT_OK


def run_backfill(settings: Settings, args: argparse.Namespace) -> int:
    try:
        days = backfill_days(args.first, args.last)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    ctx = _context(settings, args.name)
    if ctx is None:
        return EXIT_USAGE

    async def go() -> tuple[int, list[str]]:
        out: list[str] = []
        try:
            code = await backfill(ctx, args.name, days, out, ignore_pause=args.ignore_pause)
            if code == EXIT_PAUSED and (note := await pause_note(ctx, args.name)) is not None:
                out.append(note)
            return code, out
        finally:
            await ctx.runtime.close()

    code, lines = asyncio.run(go())
    for line in lines:
        print(line)
    return code

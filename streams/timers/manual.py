"""``python -m streams timers run NAME [--as-of ISO-8601] [--rerun] [--ignore-pause]``: run one
slot of any registered job now, through the registry's own claim and run path, and print what
it did. A job paused cluster-wide (``timers pause``) is not run unless ``--ignore-pause``.

SIGTERM or SIGINT stops the run and hands its slot back, as a worker's stop does.

Exit codes: 0 the run succeeded; 1 it failed, timed out or was cancelled (or stopped); 2 a usage or
configuration problem (unknown name, bad or future ``--as-of``); 3 the slot was already
claimed (it ran, or runs, elsewhere) and ``--rerun`` was not given; 4 the job is paused
cluster-wide and ``--ignore-pause`` was not given (nothing ran, nothing was claimed).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from datetime import datetime

from db import timer_pauses
from streams import logs
from streams.settings import ConfigError, Settings
from streams.slices.slice import TimerContext
from streams.timers.runs import RunRecord
from streams.timers.schedule import RegistrationError
from streams.timers.slots import iso_utc

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DEDUPED, EXIT_PAUSED = 0, 1, 2, 3, 4
# After SIGTERM, how long a run may take to hand its slot back before it is cancelled.
STOP_GRACE_SECONDS = 10.0


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 instant: {text!r}") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no offset; give one, e.g. 2026-06-10T12:00:00+00:00 or ...Z"
        )
    return value


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``timers run NAME [--as-of ISO-8601] [--rerun]``."""
    timers = sub.add_parser(
        "timers",
        help="run one slot of a registered timer now, backfill days, pause or resume one",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = timers.add_subparsers(dest="command", metavar="<command>", required=True)
    run = commands.add_parser(
        "run",
        help="run one slot of NAME now, through the same claim and run path as the schedule",
        description="Run one slot of the registered timer NAME now (the same claim and run "
        "path as the schedule) and print its result counts.",
    )
    run.add_argument("name", metavar="NAME", help="a registered timer, e.g. document-expiry")
    run.add_argument(
        "--as-of",
        metavar="ISO-8601",
        type=_instant,
        default=None,
        help="run the slot this instant falls in (default: now); replays a missed day",
    )
    run.add_argument(
        "--rerun",
        action="store_true",
        help="run a slot that was already claimed once more, without a claim (idempotent jobs)",
    )
    add_ignore_pause(run)
    timers.set_defaults(run=run_timers)
    from streams.timers import control

    control.add_commands(commands)


def add_ignore_pause(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ignore-pause",
        action="store_true",
        help="run even though NAME is paused cluster-wide (timers pause); without it a "
        "paused job is refused (exit 4)",
    )


async def run_manual(
    ctx: TimerContext,
    name: str,
    as_of: datetime | None = None,
    *,
    rerun: bool = False,
    ignore_pause: bool = False,
) -> RunRecord:
    """One slot of ``name`` through ``ctx``'s registry (the worker's own, built but not
    started); raises KeyError for an unknown name, ValueError for a future ``as_of``."""
    await ctx.runtime.pool()  # reads the database's clock: "now" and the slot are its time
    return await ctx.registry.run_slot(name, as_of, rerun=rerun, ignore_pause=ignore_pause)


async def pause_note(ctx: TimerContext, name: str) -> str | None:
    """Who paused ``name``, when and why (ops.timer_pauses), for a refused run's report."""
    try:
        row = await timer_pauses.get(await ctx.runtime.pool(), name)
    except Exception as exc:  # the refusal stands; only its details are missing
        return f"  (who paused it could not be read: {type(exc).__name__})"
    if row is None:
        return None
    return (
        f"  paused by {row['paused_by']} at {iso_utc(row['paused_at'])}: "
        f"{row['reason'] or '(no reason given)'}"
    )


def paused_line(name: str) -> str:
    return (
        f"  refused: {name} is paused cluster-wide (timers pause); resume it with "
        f"`timers resume {name}`, or pass --ignore-pause to run it anyway"
    )


def report(record: RunRecord) -> list[str]:
    """The run's outcome and result counts, one per line."""
    where = f"slot {iso_utc(record.slot)}" if record.slot else f"as of {iso_utc(record.as_of)}"
    took = f", {record.duration_seconds:.3f} s" if record.duration_seconds is not None else ""
    lines = [
        f"timer {record.schedule}: {record.result} ({record.kind}, {where}, "
        f"run {record.run_id}{took})"
    ]
    if record.result == "deduped":
        lines.append(
            "  the slot was already claimed: it ran, or runs, elsewhere (--rerun repeats it)"
        )
    if record.result == "paused":
        lines.append(paused_line(record.schedule))
    if record.error:
        lines.append(f"  error: {record.error}")
    summary = record.summary
    if isinstance(summary, dict):
        width = max((len(str(k)) for k in summary), default=0)
        lines.extend(f"  {k:<{width}}  {v}" for k, v in summary.items())
    elif summary is not None:
        lines.append(f"  {summary}")
    return lines


def exit_code(record: RunRecord) -> int:
    if record.result == "ok":
        return EXIT_OK
    if record.result == "deduped":
        return EXIT_DEDUPED
    if record.result == "paused":
        return EXIT_PAUSED
    return EXIT_FAILED


def run_timers(settings: Settings, args: argparse.Namespace) -> int:
    logs.configure_from(settings)
    from streams.timer_app import create_timers

    try:
        ctx = create_timers(settings)
    except (ConfigError, RegistrationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.name not in ctx.registry.names:
        known = ", ".join(ctx.registry.names)
        print(f"error: no timer named {args.name!r} (known: {known})", file=sys.stderr)
        return EXIT_USAGE

    notes: list[str | None] = []

    async def once() -> RunRecord:
        # SIGTERM / SIGINT stop the run as a worker's stop does: the slot is handed back
        # (claimable at once by the next `timers run` or any worker), never left claimed.
        loop = asyncio.get_running_loop()
        stops: list[asyncio.Task[None]] = []

        def on_signal() -> None:
            if not stops:
                stops.append(loop.create_task(ctx.registry.interrupt(STOP_GRACE_SECONDS)))

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            record = await run_manual(
                ctx, args.name, args.as_of, rerun=args.rerun, ignore_pause=args.ignore_pause
            )
            if record.result == "paused":
                notes.append(await pause_note(ctx, args.name))
            return record
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await asyncio.gather(*stops, return_exceptions=True)
            await ctx.runtime.close()

    try:
        record = asyncio.run(once())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for line in report(record):
        print(line)
    for note in notes:
        if note is not None:
            print(note)
    return exit_code(record)

"""Command line: ``python -m streams worker|migrate|topics|dlq|automation|demo`` (also installed as
``streams``, with ``reminders`` as an alias)."""

from __future__ import annotations

import asyncio
import gc
import sys

from streams.errors import install_log_redaction
from streams.settings import ConfigError, load_settings

USAGE = """usage: streams <command>   (or: python -m streams <command>)
  --version  print the installed version and exit (reads no settings)
  worker   run a Faust worker (agents, timers, outbox relay, web on WEB_PORT)
  migrate  apply database migrations
  topics   create the contract topics and DLQs that are missing
  dlq replay TOPIC [--since ISO-8601] [--dry-run]
           re-publish dead-lettered records of an input topic to their source topic
  automation ensure --json FILE | deactivate KEY... --reason CODE | show KEY | hold
           | release KEY | retry-key KEY
           scheduler rows by hand and the support commands (rows on hold)
  outbox parked | retry ID | drop ID
           rows the relay parked (Kafka refused them for good): list, send again, delete
  explain ID
           what happened to a ReminderId or EventId: input message, row, outbox, topic offset
  timers run NAME [--as-of ISO-8601] [--rerun]
           run one slot of a registered timer now (same claim and run path as the schedule),
           print its result counts; exit 1 on failure, 3 when the slot was already claimed
  demo     send the demo workload of every slice and report what came out
"""


def version() -> str:
    """The installed distribution's version; the source tree's when it is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("reminders-stream")
    except PackageNotFoundError:
        return "0+unknown"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        print(f"streams {version()}")
        return 0
    command, rest = args[0], args[1:]
    # Before anything logs: no record of this process carries an exception's own text.
    install_log_redaction()
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if command == "migrate":
        from db.migrate import MigrationError, migrate

        try:
            applied = asyncio.run(
                migrate(
                    settings.database_url,
                    lock_wait_seconds=settings.db_migrate_lock_wait_seconds,
                    lock_timeout_seconds=settings.db_migrate_lock_timeout_seconds,
                )
            )
        except MigrationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"migrations applied: {', '.join(applied) if applied else 'none (up to date)'}")
        return 0
    if command == "topics":
        from streams.kafka_admin import ensure_topics

        created = asyncio.run(ensure_topics(settings))
        print(f"topics created: {', '.join(created) if created else 'none (all exist)'}")
        return 0
    if command == "worker":
        if settings.event_loop == "uvloop":
            import uvloop

            uvloop.install()  # before the app exists: Faust's loops come from the policy
        from streams import faust_compat

        faust_compat.install()  # Faust's fetch loop without a task per record (fetch_loop.py)
        from streams.app import create_worker
        from streams.timers.schedule import RegistrationError

        try:
            ctx = create_worker(settings)
        except (ConfigError, RegistrationError, ValueError) as exc:
            # The worker does not start half-configured; the message names the setting.
            print(f"error: {exc}", file=sys.stderr)
            return 2
        app, timer_process = ctx.app, ctx.timer_process
        from streams.wait import startup_gate
        from streams.web.startup import startup_health

        # A worker started before PostgreSQL or Kafka waits for them (on the loop Faust
        # will run on) instead of exiting; bad configuration still stops it at once. Its
        # timer process needs only PostgreSQL: it starts (and dispatches into the outbox)
        # while the worker still waits for Kafka; /health says what it waits for.
        code = startup_gate(
            app.loop,
            settings,
            after_postgres=timer_process.start if timer_process is not None else None,
            health=lambda status: startup_health(
                settings.web_host, settings.web_port, status, timer_process
            ),
        )
        if code:
            if timer_process is not None:
                app.loop.run_until_complete(timer_process.stop())
            return code
        sys.argv = [
            "reminders",
            "worker",
            "-l",
            # Faust spells it "warn" (and refuses "warning", which LOG_LEVEL accepts).
            "warn" if settings.log_level == "warning" else settings.log_level,
            "--web-port",
            str(settings.web_port),
            *rest,
        ]
        # A long-lived worker allocates millions of short-lived objects: what exists now
        # (modules, the app) is left out of every later collection, and the cyclic
        # collector runs after 50,000 allocations instead of 700 (a full collection walks
        # the whole heap; with the defaults that was ~15% of a busy worker's CPU, and a
        # pause of the loop that also dispatches reminders).
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        app.main()
        return 0
    if command == "dlq":
        from streams.dlq.cli import run_cli

        return run_cli(settings, rest)
    if command == "automation":
        from streams.slices.automation.cli import run_cli as automation_cli

        return automation_cli(settings, rest)
    if command == "outbox":
        from streams.outbox.cli import run_cli as outbox_cli

        return outbox_cli(settings, rest)
    if command == "explain":
        from streams.explain import run_cli as explain_cli
        from streams.runtime import Runtime

        return asyncio.run(explain_cli(Runtime(settings), rest))
    if command == "timers":
        from streams.timers.manual import run_cli as timers_cli

        return timers_cli(settings, rest)
    if command == "demo":
        from streams.demo import run_demo

        return asyncio.run(run_demo(settings, rest))
    print(USAGE, file=sys.stderr)
    return 2

"""Command line: ``streams <command> …`` (also ``python -m streams``, with ``reminders`` as an
alias): one argparse tree. The service-wide commands are here and in their packages (timers,
dlq, outbox, explain, rows); each declared slice (streams/slices) with a ``cli`` adds its own
(argparse ``add_commands``). Parsing (and ``--help`` at every level) reads no settings and connects to
nothing; the settings load only once a command is about to run."""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import Sequence
from typing import Any

from streams import logs, tracing
from streams.errors import install_log_redaction
from streams.settings import ConfigError, Settings, load_settings

PROG = "streams"


def version() -> str:
    """The installed distribution's version; the source tree's when it is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("reminders-stream")
    except PackageNotFoundError:
        return "0+unknown"


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from db.connector import DatabaseUnavailable
    from db.migrate import MigrationError, migrate
    from streams.startup_wait import postgres_dependency

    async def run() -> list[str]:
        # A refused login, an unknown database, an untrusted certificate: named at once
        # (exit 2); a server not up yet is waited for as the worker waits.
        await _wait(settings, postgres_dependency(settings.database_url))
        return await migrate(
            settings.database_url,
            lock_wait_seconds=settings.db_migrate_lock_wait_seconds,
            lock_timeout_seconds=settings.db_migrate_lock_timeout_seconds,
        )

    try:
        applied = _run_checked(run())
    except MigrationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except DatabaseUnavailable as exc:
        print(f"error: setting DATABASE_URL: {exc}", file=sys.stderr)
        return 1
    except _Exit as done:
        return done.code
    print(f"migrations applied: {', '.join(applied) if applied else 'none (up to date)'}")
    return 0


def _topics(settings: Settings, args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError

    from streams.app import create_app
    from streams.errors import describe
    from streams.kafka_access import faust_changelog_configs
    from streams.kafka_admin import ensure_topics
    from streams.kafka_client import security_options
    from streams.startup_wait import kafka_dependency
    from streams.timers.schedule import RegistrationError

    # Faust's table changelogs too: a worker with KAFKA_DECLARE_INTERNAL_TOPICS=false does
    # not make them (the app is built, not started, for their names and configuration).
    try:
        changelogs = faust_changelog_configs(create_app(settings))
    except (ConfigError, RegistrationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)  # as the worker: the message names the setting
        return 2

    async def run() -> list[str]:
        # A refused login or an untrusted CA named at once, as the worker does; a missing
        # ACL comes out of ensure_topics as AccessDenied naming it.
        await _wait(
            settings, kafka_dependency(settings.kafka_bootstrap, options=security_options(settings))
        )
        return await ensure_topics(settings, configs=changelogs)

    try:
        created = _run_checked(run())
    except _Exit as done:
        return done.code
    except (KafkaError, TimeoutError) as exc:
        print(f"error: Kafka at KAFKA_BOOTSTRAP: {describe(exc)}", file=sys.stderr)
        return 1
    print(f"topics created: {', '.join(created) if created else 'none (all exist)'}")
    return 0


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


async def _wait(settings: Settings, dependency: Any) -> None:
    from streams.startup_wait import wait_for

    await wait_for([dependency], limit_s=settings.startup_wait_seconds)


def _run_checked(coro: Any) -> Any:
    """``asyncio.run(coro)``; a configuration error (the message names the setting) exits 2,
    STARTUP_WAIT_SECONDS running out exits 1: printed as one line, no traceback."""
    from streams.startup_wait import DependencyConfigError, DependencyTimeout

    try:
        return asyncio.run(coro)
    except DependencyConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise _Exit(2) from None
    except DependencyTimeout as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise _Exit(1) from None


def _worker(settings: Settings, args: argparse.Namespace) -> int:
    if settings.event_loop == "uvloop":
        import uvloop

        uvloop.install()  # before the app exists: Faust's loops come from the policy
    from streams import faust_compat

    faust_compat.install()  # Faust's fetch loop and commit bookkeeping, patched
    from streams.app import create_worker
    from streams.timers.schedule import RegistrationError

    try:
        ctx = create_worker(settings)
    except (ConfigError, RegistrationError, ValueError) as exc:
        # The worker does not start half-configured; the message names the setting.
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app, timer_process = ctx.app, ctx.timer_process
    from streams.contracts import DLQ_SUFFIX
    from streams.kafka_access import check_worker_access, faust_internal_topics
    from streams.kafka_admin import internal_topic_names, service_topic_names
    from streams.startup_gate import startup_gate
    from streams.web.startup import startup_health

    # A worker started before PostgreSQL or Kafka waits for them (on the loop Faust
    # will run on) instead of exiting; bad configuration still stops it at once. Its
    # timer process needs only PostgreSQL: it starts (and dispatches into the outbox)
    # while the worker still waits for Kafka; /health says what it waits for.
    code = startup_gate(
        app.loop,
        settings,
        after_postgres=timer_process.start if timer_process is not None else None,
        # A missing ACL named before Faust starts (it would fail deep in a client).
        after_kafka=lambda: check_worker_access(
            settings,
            service_topic_names(settings),
            faust_internal_topics(app) if settings.kafka_declare_internal_topics else [],
            settings.app_id,
            configs=[n for n in internal_topic_names(settings) if n.endswith(DLQ_SUFFIX)],
        ),
        health=lambda status: startup_health(
            settings.web_host, settings.web_port, status, timer_process
        ),
    )
    if code:
        if timer_process is not None:
            app.loop.run_until_complete(timer_process.stop())
        return code
    # Faust's worker command reads sys.argv; the arguments this tree did not know go to it.
    sys.argv = [
        "reminders",
        # Faust prints its banner straight to stdout: with JSON lines it would be the one
        # line that is not JSON (what it says is on /status).
        *(["--quiet"] if settings.log_format == "json" else []),
        "worker",
        "-l",
        # Faust spells it "warn" (and refuses "warning", which LOG_LEVEL accepts).
        "warn" if settings.log_level == "warning" else settings.log_level,
        "--web-port",
        str(settings.web_port),
        *args.faust_args,
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


def _demo(settings: Settings, args: argparse.Namespace) -> int:
    from streams.demo import run_demo

    return asyncio.run(run_demo(settings))


def _slice_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Each declared slice with a ``cli`` adds its commands."""
    from streams import slices

    for s in slices.declared():
        if s.cli is not None:
            s.cli(sub)


def build_parser() -> argparse.ArgumentParser:
    from streams import explain
    from streams.console import cli as console_cli
    from streams.dlq import cli as dlq_cli
    from streams.outbox import cli as outbox_cli
    from streams.timers import manual

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The reminder stream processor (also: python -m streams; reminders).",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"{PROG} {version()}",
        help="print the installed version and exit (reads no settings)",
    )
    sub = parser.add_subparsers(dest="streams_command", metavar="<command>", required=True)
    worker = sub.add_parser(
        "worker",
        help="run a Faust worker (agents, timers, outbox relay, web on WEB_PORT)",
        description="Run a Faust worker: agents, timers, the outbox relay and the web "
        "server on WEB_PORT. Arguments not listed here go to Faust's worker command.",
    )
    worker.set_defaults(run=_worker)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(run=_migrate)
    sub.add_parser(
        "topics",
        help="create the contract topics and DLQs that are missing",
        description="Create the contract topics, DLQs and the slices' internal topics that "
        "are missing, and set every DLQ's retention to KAFKA_DLQ_RETENTION_HOURS.",
    ).set_defaults(run=_topics)
    dlq_cli.add_commands(sub)
    _slice_commands(sub)
    outbox_cli.add_commands(sub)
    explain.add_commands(sub)
    manual.add_commands(sub)
    console_cli.add_commands(sub)
    sub.add_parser(
        "demo", help="send the demo workload of every slice and report what came out"
    ).set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None, *, settings: Settings | None = None) -> int:
    """Parse ``argv`` (default: the process's), then load the settings (unless given) and run
    the command; returns its exit code (2 for a usage or configuration problem)."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
        if unknown and args.run is not _worker:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # --help, --version, or argparse printed the usage and the problem
        return exc.code if isinstance(exc.code, int) else 2
    args.faust_args = unknown  # only the worker has any: Faust reads them
    # Before anything logs: no record of this process carries an exception's own text.
    install_log_redaction()
    if settings is None:
        try:
            settings = load_settings()
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    # One logging set-up for every command (the worker's Faust applies it again).
    logs.configure_from(settings)
    tracing.configure(process="worker" if args.run is _worker else "cli")
    run: Any = args.run
    if run is _worker:
        code: int = run(settings, args)  # its startup gate names what is refused
        return code
    try:
        code = run(settings, args)
    except Exception as exc:
        refused = _refusal(settings, exc)
        if refused is None:
            raise
        print(f"error: {refused}", file=sys.stderr)
        return 2
    return code


def _refusal(settings: Settings, exc: BaseException) -> str | None:
    """What any command says, instead of a traceback, when PostgreSQL or Kafka refuses its
    configuration (a login, a database, a certificate, an ACL): the setting to fix."""
    from aiokafka.errors import (
        ClusterAuthorizationFailedError,
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
    )

    from streams.kafka_access import principal_setting
    from streams.startup_wait import DependencyConfigError, postgres_refusal

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DependencyConfigError):
            return str(current)
        problem = postgres_refusal(current, settings.database_url)
        if problem is not None:
            return f"setting DATABASE_URL: {problem}"
        if isinstance(
            current,
            TopicAuthorizationFailedError
            | GroupAuthorizationFailedError
            | ClusterAuthorizationFailedError,
        ):
            return (
                f"setting {principal_setting(settings)}: Kafka refused the principal"
                f" ({type(current).__name__}): grant the ACLs docs/deploy.md lists under"
                ' "Kafka ACLs"'
            )
        current = current.__cause__ or current.__context__
    return None

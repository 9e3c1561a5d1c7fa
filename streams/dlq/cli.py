"""The ``python -m streams dlq replay`` command: arguments, per-record lines, the summary."""

from __future__ import annotations

import argparse
import asyncio
import sys

from aiokafka.errors import KafkaError

from streams.dlq.browse import DEFAULT_LIMIT, MAX_LIMIT, WINDOW, browse
from streams.dlq.replay import ReplayResult, replay_dlq
from streams.dlq.rules import (
    REDACTED_HINT,
    SKIP_REDACTED,
    SKIP_TRUNCATED,
    Decision,
    ReplayUsageError,
    parse_since,
    resolve_topic,
)
from streams.settings import Settings


def _short(reason: str, width: int = 120) -> str:
    return reason if len(reason) <= width else reason[: width - 1] + "…"


def describe(d: Decision) -> str:
    action = "replay" if d.skip is None else f"skip:{d.skip}"
    return (
        f"  partition={d.dlq_partition} offset={d.dlq_offset} kind={d.kind} action={action}"
        f" target={d.target_topic} reason={_short(d.reason)!r}"
    )


def summary(result: ReplayResult) -> str:
    verb = "would replay" if result.dry_run else "replayed"
    skipped = result.skipped
    lines = [
        f"{verb} {result.replayed}, skipped truncated {skipped[SKIP_TRUNCATED]}"
        + "".join(
            f", skipped {name} {n}" for name, n in sorted(skipped.items()) if name != SKIP_TRUNCATED
        )
        + f" (read {result.read} from {result.dlq_topic})"
    ]
    if skipped[SKIP_REDACTED]:
        lines.append(REDACTED_HINT.format(fields=", ".join(sorted(result.redacted_fields))))
    if result.dry_run:
        lines.append("dry run: nothing sent, no progress committed")
    if result.by_reason:
        lines.append("by reason:")
        lines += [f"  {n:6d}  {_short(r)}" for r, n in result.by_reason.most_common()]
    if result.by_source_topic:
        lines.append("by source topic:")
        lines += [f"  {n:6d}  {t}" for t, n in result.by_source_topic.most_common()]
    return "\n".join(lines)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``dlq replay TOPIC [--since ISO-8601] [--dry-run]``."""
    dlq = sub.add_parser(
        "dlq",
        help="dead-letter topics: list them, replay what was dead-lettered into its source topic",
        description="Dead-letter topics: replay what was dead-lettered into its source topic.",
    )
    actions = dlq.add_subparsers(dest="action", metavar="<action>", required=True)
    replay = actions.add_parser(
        "replay",
        help="re-publish <topic>.dlq to its source topic, up to its end offsets as of now",
        description="Re-publish <topic>.dlq to its source topic, up to its end offsets as of now.",
    )
    replay.add_argument(
        "topic", metavar="TOPIC", help="input topic as in the contract, e.g. pin.calendar.events.v1"
    )
    replay.add_argument(
        "--since",
        metavar="ISO-8601",
        help="start at the first record at or after this instant (ISO-8601 with offset); "
        "without it, resume after the last replay (group <APP_ID>.dlq-replay)",
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="print what would be replayed, send nothing"
    )
    replay.add_argument(
        "--reason",
        default=None,
        help="replay only the records with this reason (from the beginning, or --since); "
        "saves no progress; audited",
    )
    replay.add_argument("--partition", type=int, default=None, help="with --offset: one record")
    replay.add_argument("--offset", type=int, default=None, help="with --partition: one record")
    replay.add_argument("--actor", default=None, help="who, for the audit (default: $USER)")
    replay.set_defaults(run=run_replay)
    listing = actions.add_parser(
        "list",
        help="the newest records of <topic>.dlq with their reasons (bounded; never values)",
        description="The newest records of <topic>.dlq, newest first, with counts by reason "
        f"and kind over the last {WINDOW} records of each partition (a huge DLQ is never read "
        "whole); values are never shown.",
    )
    listing.add_argument(
        "--topic", required=True, metavar="TOPIC", help="e.g. pin.calendar.events.v1"
    )
    listing.add_argument("--reason", default=None, help="only records with this reason")
    listing.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help=f"at most (≤ {MAX_LIMIT})"
    )
    listing.add_argument("--format", choices=("text", "json"), default="text")
    listing.set_defaults(run=run_list)


def run_list(settings: Settings, args: argparse.Namespace) -> int:
    """``dlq list``; returns the exit code."""
    import json

    try:
        found = asyncio.run(browse(settings, args.topic, reason=args.reason, limit=args.limit))
    except ReplayUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, TimeoutError, OSError) as exc:
        print(
            f"error: Kafka at {settings.kafka_bootstrap} (setting KAFKA_BOOTSTRAP): {type(exc).__name__}",
            file=sys.stderr,
        )
        return 1
    if args.format == "json":
        print(json.dumps(found.view(), indent=2))
        return 0
    print(f"{found.dlq_topic}: {found.records} records, read the newest {found.read}")
    print("by reason:")
    for reason, n in found.by_reason.most_common():
        print(f"  {n:6d}  {_short(reason)}")
    print(f"newest{' with reason ' + repr(args.reason) if args.reason else ''}:")
    for e in found.entries:
        print(
            f"  {e.at or '-'} partition={e.partition} offset={e.offset} kind={e.kind} "
            f"replay={e.replay} reason={_short(e.reason)!r}"
        )
    return 0


def run_replay(settings: Settings, args: argparse.Namespace) -> int:
    """``dlq replay``; returns the exit code."""
    try:
        since = parse_since(args.since) if args.since is not None else None
        source, dlq = resolve_topic(settings, args.topic)
    except ReplayUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if (args.partition is None) != (args.offset is None):
        print("error: --partition and --offset go together (one record)", file=sys.stderr)
        return 2
    record = (args.partition, args.offset) if args.partition is not None else None
    mode = "dry run" if args.dry_run else "replay"
    start_from = f"since {since.isoformat()}" if since else "after the last replay"
    print(f"dlq {mode}: {dlq} -> {source} ({start_from})")

    def show(d: Decision) -> None:
        if args.dry_run or d.skip is not None:
            print(describe(d))

    try:
        result = asyncio.run(
            replay_dlq(
                settings,
                args.topic,
                since=since,
                dry_run=args.dry_run,
                on_decision=show,
                reason=args.reason,
                record=record,
            )
        )
    except ReplayUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, TimeoutError, OSError) as exc:
        detail = str(exc) if isinstance(exc, KafkaError) else f"{type(exc).__name__}: {exc}"
        print(
            f"error: Kafka at {settings.kafka_bootstrap} (setting KAFKA_BOOTSTRAP): {detail};"
            " what was acked is committed, running the command again resumes after it",
            file=sys.stderr,
        )
        return 1
    print(summary(result))
    if not args.dry_run:  # every replay command that sent (or could have sent) is audited
        from streams.dlq.audit import audit_replay
        from streams.timers.control import actor_default

        audit_id = asyncio.run(
            audit_replay(settings, result, args.actor or actor_default(), args.reason, record)
        )
        print(f"audited: {audit_id}")
    return 0

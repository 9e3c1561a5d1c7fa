"""The ``python -m streams dlq replay`` command: arguments, per-record lines, the summary."""

from __future__ import annotations

import argparse
import asyncio
import sys

from aiokafka.errors import KafkaError

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
        help="dead-letter topics: replay what was dead-lettered into its source topic",
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
    replay.set_defaults(run=run_replay)


def run_replay(settings: Settings, args: argparse.Namespace) -> int:
    """``dlq replay``; returns the exit code."""
    try:
        since = parse_since(args.since) if args.since is not None else None
        source, dlq = resolve_topic(settings, args.topic)
    except ReplayUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    mode = "dry run" if args.dry_run else "replay"
    start_from = f"since {since.isoformat()}" if since else "after the last replay"
    print(f"dlq {mode}: {dlq} -> {source} ({start_from})")

    def show(d: Decision) -> None:
        if args.dry_run or d.skip is not None:
            print(describe(d))

    try:
        result = asyncio.run(
            replay_dlq(settings, args.topic, since=since, dry_run=args.dry_run, on_decision=show)
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
    return 0

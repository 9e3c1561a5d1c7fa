"""A DLQ replay command (plain, one record, or the records of one reason) written into
``ops.console_audit``: it changes no table row, so its audit row is recorded on its own."""

from __future__ import annotations

from datetime import UTC, datetime

from db import console_audit
from db.connector import connection, create_pool
from streams.dlq.replay import ReplayResult
from streams.settings import Settings


async def audit_replay(
    settings: Settings,
    result: ReplayResult,
    actor: str,
    reason: str | None,
    record: tuple[int, int] | None,
) -> int:
    if record is not None:
        target = f"{result.dlq_topic}:{record[0]}:{record[1]}"
    else:
        target = f"{result.dlq_topic}:{'reason' if reason is not None else 'all'}"
    pool = await create_pool(settings.database_url, min_size=1, max_size=1)
    try:
        async with connection(pool) as conn:
            return await console_audit.record(
                conn,
                datetime.now(UTC),
                actor,
                "dlq-replay",
                "dlq",
                target,
                reason or "",
                "changed" if result.replayed else "unchanged",
                {
                    "replayed": result.replayed,
                    "skipped": dict(result.skipped),
                    "source_topic": result.source_topic,
                    "dlq_reason": reason,
                },
            )
    finally:
        await pool.close()

"""What a row wrote to the outbox, for its detail page: the records of its key that are its
own, and whether each was published, is still waiting, or was parked (never payloads)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from db import outbox as outbox_repo
from db.connector import Executor

# Outbox records of one key looked at (they are kept for OUTBOX_RETENTION_HOURS).
MAX_RECORDS = 200


def delivery(record: dict[str, Any]) -> str:
    """``published``, ``parked`` (Kafka refused it for good: ``outbox parked``) or ``waiting``."""
    if record.get("parked"):
        return "parked"
    return "published" if record.get("published_at") else "waiting"


async def records_of(
    db: Executor, key: str, mine: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """The outbox records of ``key`` whose payload ``mine`` accepts, oldest first."""
    out = []
    for r in await outbox_repo.records_of_key(db, key, MAX_RECORDS):
        if not mine(json.loads(r.payload)):
            continue
        record: dict[str, Any] = {
            "outbox_id": r.id,
            "topic": r.topic,
            "created_at": r.created_at,
            "published_at": r.published_at,
            "partition": r.published_partition,
            "offset": r.published_offset,
            **({"parked": r.parked_reason} if r.parked_reason else {}),
        }
        record["delivery"] = delivery(record)
        out.append(record)
    return out

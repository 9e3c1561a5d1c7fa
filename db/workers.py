"""Repository of ops.workers: one function per statement in db/queries/workers.sql."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from db.connector import Connection
from db.queries import sql


@dataclass(frozen=True, slots=True)
class LiveWorker:
    worker_id: str
    web_url: str
    started_at: datetime
    last_seen_at: datetime


async def heartbeat(
    conn: Connection, worker_id: str, app_id: str, web_url: str, now: datetime
) -> None:
    await conn.execute(sql("workers_heartbeat"), worker_id, app_id, web_url, now)


async def list_live(conn: Connection, app_id: str, since: datetime) -> list[LiveWorker]:
    rows = await conn.fetch(sql("workers_list_live"), app_id, since)
    return [
        LiveWorker(r["worker_id"], r["web_url"], r["started_at"], r["last_seen_at"]) for r in rows
    ]

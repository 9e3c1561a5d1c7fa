"""Shared bench helpers: throwaway databases and topics, seeding reminder rows in bulk,
percentiles, a process's resident memory."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from bench.progress import Progress
from devkit import database as database_module
from devkit.seed import seed_reminders
from devkit.workers import process_tree

__all__ = ["seed_reminders"]

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://reminders@127.0.0.1:55432/reminders")
KAFKA_BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092")


def url_for(name: str) -> str:
    return database_module.with_database(DATABASE_URL, name)


async def admin(sql: str) -> None:
    """``sql`` on the admin database of the bench's server."""
    await database_module.admin(DATABASE_URL, sql)


@asynccontextmanager
async def database(template: str | None = None, prefix: str = "bench") -> AsyncIterator[str]:
    """A fresh database (migrated, or a copy of ``template``), dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    if template is not None:
        await database_module.release(DATABASE_URL, template)
    async with database_module.scratch_database(DATABASE_URL, name, template=template) as url:
        yield url


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary directory for the bench's workers (their data and logs), removed when the
    bench ends normally and kept, with a line saying where, when it fails."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    except BaseException:
        print(f"  (the workers' data and logs are kept in {path})")
        raise
    shutil.rmtree(path, ignore_errors=True)


async def drop_topics(prefix: str) -> None:
    """Delete every topic whose name starts with ``prefix`` (a bench's own topics, the
    workers' changelogs): runs of the bench leave nothing behind in the shared broker."""
    admin_client = AIOKafkaAdminClient(bootstrap_servers=KAFKA_BOOTSTRAP)
    await admin_client.start()
    try:
        names = [t for t in await admin_client.list_topics() if t.startswith(prefix)]
        if names:
            await admin_client.delete_topics(names)
    except Exception as exc:  # cleanup only: never hide the bench's own result
        print(f"  (could not delete topics {prefix}*: {type(exc).__name__})")
    finally:
        await admin_client.close()


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB of a live process and its children (a worker and its timer
    process), added up, from /proc/<pid>/status."""
    fields: dict[str, float] = {"VmRSS": 0.0, "VmHWM": 0.0}
    for member in process_tree(pid):
        try:
            lines = Path(f"/proc/{member}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(":")
            if key in fields:
                fields[key] += int(value.split()[0]) / 1024  # kB -> MB
    return fields["VmRSS"], fields["VmHWM"]


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary(values: Sequence[float]) -> str:
    return (
        f"n={len(values)} p50={pct(values, 50):.3f} p95={pct(values, 95):.3f} "
        f"p99={pct(values, 99):.3f} max={max(values) if values else float('nan'):.3f} "
        f"mean={statistics.fmean(values) if values else float('nan'):.3f}"
    )


def calendar_event(
    start_at: datetime, offsets: Sequence[int], occurred_at: datetime
) -> dict[str, Any]:
    """A pin.calendar.events.v1 body: a new Planned event (Version 1) with fresh ids."""
    event_id = str(uuid.uuid4())
    return {
        "ContractVersion": 1,
        "EventId": event_id,
        "TenantId": str(uuid.uuid4()),
        "OwnerUserId": str(uuid.uuid4()),
        "Kind": "Meeting",
        "StartAt": start_at.isoformat(),
        "TimeZone": "UTC",
        "Status": "Planned",
        "ReminderOffsetsMinutes": list(offsets),
        "Version": 1,
        "OccurredAt": occurred_at.isoformat(),
    }


async def produce(topic: str, bodies: Sequence[dict[str, Any]], label: str) -> None:
    """Send every body keyed by its EventId, as fast as the producer goes, and flush."""
    producer = AIOKafkaProducer(
        bootstrap_servers=KAFKA_BOOTSTRAP, linger_ms=20, max_batch_size=256 * 1024
    )
    await producer.start()
    try:
        with Progress(label, total=len(bodies), unit="events") as progress:
            for i, body in enumerate(bodies, 1):
                await producer.send(topic, json.dumps(body).encode(), key=body["EventId"].encode())
                if i % 1000 == 0:
                    progress.update(i)
            await producer.flush()
            progress.update(len(bodies))
    finally:
        await producer.stop()

"""A per-key cache on a changelog-backed Faust table, written from batched (noack) processing.

The cache is the only door to the worker's local store (RocksDB on its own disk), so every
error of that store is caught here and named for what it is: ``LocalStorageError``, an
infrastructure fault, never the input's. A failing read is a miss (PostgreSQL decides
anyway); a failing write, which comes after the caller's commit, holds the caller and is
retried with backoff until the store takes it. Both are counted
(``reminders_stream_local_storage_errors_total``) and make ``/health`` not ready until the store works
again (docs/architecture.md, "A worker's own disk").
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.structs import TopicPartition
from faust.tables.base import Collection
from faust.types import EventT, TableT

from streams import faults, logs
from streams.faust_compat import (
    estimated_keys,
    in_event,
    is_rocks_store,
    is_rocksdict_store,
    json_bytes,
    partition_db,
    write_batch,
)
from streams.metrics import AgentMetrics
from streams.tables.changelog import OrderedSends, Records, send_changelog

log = logging.getLogger("streams.tables")

# A write the local store refuses is tried again after these (doubling).
RETRY_FIRST_SECONDS = 0.2
RETRY_MAX_SECONDS = 10.0


class LocalStorageError(Exception):
    """The worker's own store failed a read or a write of a cache table (a full or failing
    disk, a closed or corrupt database): the worker is unwell, the input is fine."""

    reason = "local_storage_error"

    def __init__(self, table: str, op: str, error: str) -> None:
        super().__init__(f"{self.reason}: table={table} op={op} error={error}")
        self.table = table
        self.op = op
        self.error = error


def describe(exc: BaseException) -> str:
    """A short description of a store error without what it was about: the errno name of an
    OSError, else the type and RocksDB's status (its first two parts, e.g. "IO error: No
    space left on device", not the file or the key that follow)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{type(exc).__name__} {errno.errorcode.get(exc.errno, str(exc.errno))}"
    status = ":".join(str(exc).split(":")[:2]).strip()[:80]
    return f"{type(exc).__name__}: {status}" if status else type(exc).__name__


@dataclass
class Failing:
    """An operation of a table's local store that failed and has not worked since."""

    since: float
    error: str
    errors: int = 1


def approximate_keys(table: TableT[Any, Any]) -> int | None:
    """The table's key count without walking it: RocksDB's own estimate per partition
    database (``len()`` of a RocksDB-backed table iterates every key, on every refresh)."""
    store = getattr(table, "data", None)
    if is_rocks_store(store):
        return estimated_keys(store)
    inner = getattr(store, "data", None)
    if isinstance(inner, dict):  # faust's in-memory store keeps a plain dict: len() is O(1)
        return len(inner)
    return None


class KeyCache:
    """Counts hits and misses; the value is whatever the owning agent stores (JSON-able)."""

    def __init__(
        self,
        table: TableT[Any, Any],
        metrics: AgentMetrics,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = table
        self.name = table.name
        self._hit = metrics.cache.labels(self.name, "hit")
        self._miss = metrics.cache.labels(self.name, "miss")
        self._errors = metrics.local_storage_errors
        self._failing_gauge = metrics.local_storage_failing.labels(self.name)
        self.hits = 0
        self.misses = 0
        self._changelog = OrderedSends(f"{self.name}-changelog")
        self._sleep = sleep
        self._clock = clock
        self._failing: dict[str, Failing] = {}

    def lookup(self, event: EventT[Any], key: str) -> Any:
        """The value of a key that lives in the partition of ``event``'s message, counted as
        a hit or a miss."""
        value = self.read(event, key)
        self.record(value is not None)
        return value

    def read(self, event: EventT[Any], key: str) -> Any:
        """The value (uncounted) of a key that lives in the partition of ``event``'s message:
        one read of that partition's RocksDB database, as Faust's store reads it in the
        event's context, without the table's layers on every read (a miss went through
        them twice, ``in`` then ``[]``); without the event, RocksDB looks in every one.
        A store that fails the read answers None: the caller asks PostgreSQL."""
        try:
            store = _rocksdict_store(self.table)
            if store is None:
                with in_event(event):
                    value = self.table.get(key)
            else:
                raw = partition_db(store, event.message.partition).get(json_bytes(key))
                value = None if raw is None else json.loads(raw)
        except Exception as exc:
            return self._read_failed(exc)
        if self._failing:
            self._worked("read")
        return value

    def peek(self, key: str) -> Any:
        """The value without counting it: for callers that decide afterwards whether the
        cache answered (``record``), e.g. only once its claim has been verified. None when
        the store fails the read."""
        try:
            value = self.table.get(key)
        except Exception as exc:
            return self._read_failed(exc)
        if self._failing:
            self._worked("read")
        return value

    def record(self, hit: bool, n: int = 1) -> None:
        """Count ``n`` lookups the caller settled (hit) or had to ask PostgreSQL about (miss)."""
        if n <= 0:
            return
        if hit:
            self.hits += n
            self._hit.inc(n)
        else:
            self.misses += n
            self._miss.inc(n)

    def put(self, event: EventT[Any], key: str, value: Any) -> None:
        """Remember one key; raises LocalStorageError when the store refuses it."""
        try:
            with in_event(event):
                self.table[key] = value
        except Exception as exc:
            raise self._failed("write", exc) from exc
        if self._failing:
            self._worked("write")

    async def put_many(self, entries: Sequence[tuple[EventT[Any], str, Any]]) -> None:
        """Remember many keys at once (each in the partition of the message it came from),
        waiting while the local store refuses the write.

        A Faust table writes its changelog one record at a time (a future, the producer
        buffer, a RocksDB write of the persisted offset per record): at ingest rates that
        costs more than the database write the cache saves. Here the local store gets
        one RocksDB write batch per partition and the changelog one producer batch, with
        the persisted offset set once per batch when Kafka acknowledges it. Same records,
        same partitions, same bytes: a standby or a recovering worker reads them as ever.

        Callers write after their commit. A store that refuses the write (disk full, I/O
        error) holds the caller, retried with backoff until the store takes it: the
        caller's batch is acked only then, so its partition stops (visibly: ``/health``,
        ``reminders_stream_local_storage_errors_total``) instead of dead-lettering valid messages,
        and a worker stopped meanwhile leaves the batch to be delivered again (PostgreSQL
        calls it stale; the cache learns what is stored).
        """
        if not entries:
            return
        delay = RETRY_FIRST_SECONDS
        while True:
            try:
                records = self._store(entries)
                break
            except LocalStorageError as exc:
                logs.event(
                    log,
                    logging.WARNING,
                    "local_storage_retry",
                    table=self.name,
                    op="write",
                    keys=len(entries),
                    error=exc.error,
                    delay_s=delay,
                )
                await self._sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
        if self._failing:
            self._worked("write")
        if records is not None:
            # The changelog is sent behind the caller's back, in order: a producer batch
            # waits for the previous one of its partition to leave, and the caller (the
            # next database batch) need not wait for that.
            await self._changelog.submit(
                lambda: send_changelog(self.table, records, self._persisted)
            )

    def _store(self, entries: Sequence[tuple[EventT[Any], str, Any]]) -> Records | None:
        """Write the local store; the records for the changelog when this module sends it
        (None when Faust's table sent them)."""
        try:
            faults.hit("cache.store_write")
            store = _rocksdict_store(self.table)
            if store is not None:
                return _store_locally(store, entries)
            # Another store (in memory) or a mapping standing in for the table in tests.
            for event, key, value in entries:
                with in_event(event):
                    self.table[key] = value
            return None
        except Exception as exc:
            raise self._failed("write", exc) from exc

    def _failed(self, op: str, exc: BaseException) -> LocalStorageError:
        """Count a failed operation of the store and keep it for /health until one works."""
        error = describe(exc)
        self._errors.labels(self.name, op).inc()
        failing = self._failing.get(op)
        if failing is None:
            self._failing[op] = Failing(self._clock(), error)
            self._failing_gauge.set(1)
        else:
            failing.errors += 1
            failing.error = error
        return LocalStorageError(self.name, op, error)

    def _read_failed(self, exc: BaseException) -> None:
        new = "read" not in self._failing
        error = self._failed("read", exc)
        if new:  # once, not per key: the count and /health say how often
            logs.event(
                log,
                logging.WARNING,
                "local_storage_read_failed",
                table=self.name,
                error=error.error,
                fallback="database",
            )

    def _worked(self, op: str) -> None:
        failing = self._failing.pop(op, None)
        if failing is None:
            return
        if not self._failing:
            self._failing_gauge.set(0)
        logs.event(
            log,
            logging.WARNING,
            "local_storage_recovered",
            table=self.name,
            op=op,
            errors=failing.errors,
            for_s=self._clock() - failing.since,
        )

    def failing(self) -> dict[str, Any]:
        """What /health says of this table's local store: per operation failing now, the
        reason, the error (value-free), since how long and how many times; empty while it
        works."""
        now = self._clock()
        return {
            op: {
                "reason": LocalStorageError.reason,
                "error": f.error,
                "for_s": round(now - f.since, 1),
                "errors": f.errors,
            }
            for op, f in self._failing.items()
        }

    async def flush(self, timeout: float = 10.0) -> None:
        """Let the changelog sends still queued go out (a worker that stops)."""
        await self._changelog.drain(timeout)

    def _persisted(
        self, topic: str, partition: int, count: int
    ) -> Callable[[asyncio.Future[Any]], None]:
        return _persisted(self.table.data, topic, partition, count)

    def stats(self) -> dict[str, Any]:
        total = self.hits + self.misses
        return {
            "table": self.name,
            "keys": approximate_keys(self.table),
            "hits": self.hits,
            "misses": self.misses,
            "hit_ratio": round(self.hits / total, 4) if total else None,
        }


def _rocksdict_store(table: TableT[Any, Any]) -> Any:
    """The table's store when it is Faust's RocksDB store on rocksdict (the worker's), which
    this module reads and writes directly, a key in the database of its message's partition
    as Faust's store places it; None for anything else (in memory, test doubles, a global
    or partitioner-placed table), which goes through Faust's table."""
    if not isinstance(table, Collection) or table.is_global or table.use_partitioner:
        return None
    data = table.data
    return data if is_rocksdict_store(data) else None


def _store_locally(store: Any, entries: Sequence[tuple[EventT[Any], str, Any]]) -> Records:
    """Write the local store now, one RocksDB write batch per partition database; return
    the encoded records per changelog partition."""
    records: Records = defaultdict(list)
    for event, key, value in entries:
        records[event.message.partition].append((json_bytes(key), json_bytes(value)))
    for partition, items in records.items():
        write_batch(store, partition, items)
    return dict(records)


def _persisted(
    store: Any, topic: str, partition: int, count: int
) -> Callable[[asyncio.Future[Any]], None]:
    """The delivery callback of one changelog batch of ``count`` records: once Kafka
    acknowledged it, the partition's persisted offset in the local store moves to its
    last record (never back: batches may be acknowledged out of order)."""

    def done(fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            # A lost changelog batch leaves the cache behind the database after a move or a
            # restart; the applier checks what a cache says against the stored rows.
            logs.event(
                log, logging.WARNING, "changelog_batch_failed", topic=topic, partition=partition
            )
            return
        tp = TopicPartition(topic, partition)
        last = fut.result().offset + count - 1
        try:
            if last > (store.persisted_offset(tp) or -1):  # acknowledged out of order
                store.set_persisted_offset(tp, last)
        except Exception as exc:
            # The local store refused it: a recovery re-reads a little more changelog.
            logs.event(
                log,
                logging.WARNING,
                "changelog_offset_not_persisted",
                topic=topic,
                partition=partition,
                error=describe(exc),
            )

    return done

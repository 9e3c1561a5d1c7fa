"""The versioned-state recipe every state input follows: newest Version per key in a batch,
consult the cache, write in one transaction, remember in the cache only after the commit.

The cache only picks the statement; the ledger decides. A cache entry that calls a state
unchanged or stale sends it to the writer's cheap path, which moves the stored Version only
when the STORED fingerprint equals the state's and calls it stale only when the STORED
Version is not older; anything else takes the full write in the same transaction. So an
entry that lags the database (a worker killed between commit and changelog), leads it (a
changelog written for a transaction PostgreSQL lost, an older database restored) or is
simply wrong costs at most a statement, never a state (docs/architecture.md).

A slice supplies a ``StateWriter`` (its key, its content fingerprint and its SQL through a
repository); everything else is here, so each new input is a writer and a few lines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from db.connector import Connection, transaction
from streams import faults, tracing
from streams.contracts.base import StateMessage
from streams.input.consumer import Decoded
from streams.runtime import Runtime
from streams.tables.cache import KeyCache

M = TypeVar("M", bound=StateMessage)
D = TypeVar("D")
M_contra = TypeVar("M_contra", bound=StateMessage, contravariant=True)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an input message was read (lineage for explain): ids and offsets, no payload."""

    partition: int
    offset: int
    traceparent: str | None = None
    """The trace context to keep with the state it stored (streams.tracing.stored_traceparent:
    the input span's, or the record's own); None when tracing is off or it carried none."""


@dataclass
class Written(Generic[D]):
    """What one transaction of a writer did."""

    applied: set[str]
    """Keys whose new state was stored (the database's Version check let it in), of
    ``changed`` or ``unchanged`` states alike."""
    advanced: set[str]
    """Keys of unchanged states whose stored Version moved forward (same stored content)."""
    details: D
    """Whatever else the slice reports (rows made, earliest due time, ...)."""
    stored: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    """Per key found stale by the database: the stored Version and fingerprint (None when
    the row has none), so the cache can learn what the database says."""


class StateWriter(Protocol[M_contra, D]):
    def key(self, message: M_contra) -> str:
        """The entity's identity (the cache key)."""
        ...

    def fingerprint(self, message: M_contra) -> str:
        """Digest of everything the stored rows depend on (not Version or OccurredAt): two
        states with one fingerprint lead to the same rows."""
        ...

    async def write(
        self,
        conn: Connection,
        changed: Sequence[M_contra],
        unchanged: Sequence[M_contra],
        now: datetime,
        origins: Mapping[str, Origin],
        fingerprints: Mapping[str, str],
    ) -> Written[D]:
        """Store ``changed`` states where newer (Version guard in SQL), in the caller's
        transaction. ``unchanged`` are states the cache believes unchanged or stale: only
        the stored row may confirm that. Move the stored Version forward where the stored
        fingerprint equals the state's, report as stale (``stored``) those not newer than the
        stored Version, and store every other one as a changed state. ``origins`` says, per
        key, which input message it is (to keep as lineage); ``fingerprints``, per key, the
        state's ``fingerprint`` (worked out once, by the applier)."""
        ...


@dataclass
class ApplyResult(Generic[D]):
    applied: int = 0
    """Messages whose state changed rows."""
    stale: int = 0
    """Not newer than what is stored, or superseded within the batch."""
    cache_skipped: int = 0
    """Newer Version with unchanged content: only the stored Version moved."""
    applied_keys: set[str] = field(default_factory=set)
    applied_positions: set[int] = field(default_factory=set)
    """Positions in the batch of the messages that changed state (the rest were no-ops)."""
    details: D | None = None


class VersionedStateApplier(Generic[M, D]):
    """``apply`` for ContractConsumer: idempotent, so replays and redeliveries are no-ops.

    The cache (key → last Version + fingerprint) only saves work: a message it calls stale
    or unchanged goes to the writer's cheap path, checked against the stored row (which may
    send it on to the full write); anything else goes to the full write. PostgreSQL decides
    every time. The cache is written after the commit: what the database accepted, and
    for a state it called stale, the Version and fingerprint it has stored.
    """

    def __init__(
        self,
        runtime: Runtime,
        writer: StateWriter[M, D],
        cache: KeyCache | None = None,
        after_commit: Callable[[D], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.writer = writer
        self.cache = cache
        self.after_commit = after_commit
        # Batches being applied (the consumer's pipeline): their keys, and when they end.
        self._in_flight: list[tuple[frozenset[str], asyncio.Future[None]]] = []
        self.waits_for_keys_in_flight = 0
        """Batches that waited for an earlier one writing some of the same keys."""

    async def __call__(self, batch: Sequence[Decoded[M]]) -> ApplyResult[D]:
        writer = self.writer
        newest: dict[str, tuple[int, Decoded[M]]] = {}
        for i, d in enumerate(batch):
            key = writer.key(d.message)
            seen = newest.get(key)
            if seen is None or d.message.version > seen[1].message.version:
                newest[key] = (i, d)
        # Keys in sorted order: two batches in flight lock their rows in the same order.
        newest = dict(sorted(newest.items()))
        # A batch with a key an earlier batch in flight is writing waits for that batch to
        # end. Written while the other's transaction is open, its statement would wait for
        # the key's row, then update it without seeing the rows the other one made (they
        # were not committed when the statement began): a reminder of the state before
        # would stay Pending. It also means the cache is never read for a key being written.
        keys = frozenset(newest)
        ahead = [end for held, end in self._in_flight if not keys.isdisjoint(held)]
        entry = (keys, asyncio.get_running_loop().create_future())
        self._in_flight.append(entry)
        try:
            if ahead:
                self.waits_for_keys_in_flight += 1
                await asyncio.wait(ahead)
            return await self._apply(newest, len(batch))
        finally:
            self._in_flight.remove(entry)
            entry[1].set_result(None)

    async def _apply(self, newest: dict[str, tuple[int, Decoded[M]]], size: int) -> ApplyResult[D]:
        writer = self.writer
        result: ApplyResult[D] = ApplyResult(stale=size - len(newest))
        # (position, key, message): the key is worked out once per message, in __call__.
        changed: list[tuple[int, str, Decoded[M]]] = []
        unchanged: list[tuple[int, str, Decoded[M]]] = []
        fingerprints: dict[str, str] = {}
        cached_entries: dict[str, Any] = {}
        for key, (i, d) in newest.items():
            # Once per state: the cache check, the writer's rows and the cache entry use it.
            fp = fingerprints[key] = writer.fingerprint(d.message)
            cached = self.cache.lookup(d.event, key) if self.cache is not None else None
            if cached is None:
                changed.append((i, key, d))
                continue
            cached_entries[key] = cached
            # Stale or unchanged per the cache: the cheap path, where the stored row decides.
            if d.message.version <= cached["v"] or cached["fp"] == fp:
                unchanged.append((i, key, d))
            else:
                changed.append((i, key, d))
        if not changed and not unchanged:
            return result
        pool = await self.runtime.pool()
        async with transaction(pool, plan_for_parameters=True) as conn:
            written = await writer.write(
                conn,
                [d.message for _, _, d in changed],
                [d.message for _, _, d in unchanged],
                self.runtime.clock.now(),
                {key: _origin(d) for _, key, d in (*changed, *unchanged)},
                fingerprints,
            )
        # Committed: from here on the cache may learn what the database now says.
        faults.hit("applier.after_commit")
        result.details = written.details
        remember: list[tuple[Any, str, Any]] = []
        for i, key, d in (*changed, *unchanged):
            if key in written.applied:
                result.applied += 1
                result.applied_keys.add(key)
                result.applied_positions.add(i)
                remember.append(self._entry(d, key, fingerprints[key]))
            elif key in written.advanced:
                result.cache_skipped += 1
                remember.append(self._entry(d, key, fingerprints[key]))
            else:
                result.stale += 1
                stored = written.stored.get(key)
                if stored is not None and stored[1] is not None:
                    value = {"v": stored[0], "fp": stored[1]}
                    if cached_entries.get(key) != value:  # a cache behind or ahead learns
                        remember.append((d.event, key, value))
        if self.cache is not None:
            await self.cache.put_many(remember)
        if self.after_commit is not None:
            self.after_commit(written.details)
        return result

    @staticmethod
    def _entry(d: Decoded[M], key: str, fp: str) -> tuple[Any, str, Any]:
        return d.event, key, {"v": d.message.version, "fp": fp}


def _origin(d: Decoded[Any]) -> Origin:
    message = getattr(d.event, "message", None)
    partition, offset = getattr(message, "partition", -1), getattr(message, "offset", -1)
    return Origin(
        partition if isinstance(partition, int) else -1,
        offset if isinstance(offset, int) else -1,
        tracing.stored_traceparent(getattr(message, "headers", None)),
    )

"""Sending one pass's rows: produce in id order, wait for every acknowledgement, and say which
rows may be marked published without reordering any key."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from db.outbox import PendingRow
from streams import logs
from streams.asynctools import describe
from streams.outbox.parking import Refusal
from streams.outbox.producer import Producer, TopicUnavailable, is_record_error
from streams.outbox.records import wire_headers

log = logging.getLogger("streams.outbox.relay")


@dataclass(slots=True)
class Sent:
    acked: list[PendingRow]
    """Acknowledged rows before their lane's first failure: these may be marked."""
    placed: dict[int, tuple[int | None, int | None]]
    """Outbox id -> the (partition, offset) Kafka acknowledged it at."""
    failed_lanes: set[int]
    """Lanes with a row that was not acknowledged, for whatever reason."""
    refused_lanes: set[int]
    """Lanes whose row Kafka refused (a record error): these cool down."""
    producer_error: BaseException | None
    """The first error that says the producer, not a record, failed."""
    refusals: dict[int, Refusal] = field(default_factory=dict)
    """Lane -> its first failed row, when Kafka refused that row (a record error)."""
    failed_ids: dict[int, list[int]] = field(default_factory=dict)
    """Lane -> ids of its rows that were not acknowledged (in id order)."""
    candidates: list[PendingRow] = field(default_factory=list)
    """Every acknowledged row, also those behind a failed row of their lane."""
    looked_up_unavailable: dict[str, BaseException] = field(default_factory=dict)
    """Topics this pass looked up and found no metadata for (not those it was told of)."""

    def acked_without(self, parked: Collection[int]) -> list[PendingRow]:
        """The rows that may be marked once the ``parked`` rows have left their lanes: per
        lane, the acknowledged rows before its first failed row that is not parked."""
        cutoff = {
            lane: min((i for i in ids if i not in parked), default=math.inf)
            for lane, ids in self.failed_ids.items()
        }
        return [r for r in self.candidates if r.id < cutoff.get(r.lane, math.inf)]


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A pass that timed out no longer awaits its futures: read their errors here so that
    # asyncio does not report them as never retrieved.
    if not future.cancelled():
        future.exception()


async def unavailable_topics(
    producer: Producer, topics: Collection[str], bound: float
) -> dict[str, BaseException]:
    """Topics whose metadata the producer cannot get, each looked up within ``bound`` seconds
    (concurrently). Without this, a send to a topic Kafka does not know waits for its
    metadata (request_timeout_ms, 40 s by default) and every later row of the pass waits
    behind it; with it, only that topic's lanes are refused."""

    async def check(topic: str) -> BaseException | None:
        try:
            await asyncio.wait_for(producer.partitions_for(topic), bound)
        except TimeoutError:
            return TopicUnavailable(f"no metadata for the topic within {bound:g}s")
        except Exception as exc:
            return exc
        return None

    names = sorted(topics)
    outcomes = await asyncio.gather(*(check(t) for t in names))
    return {t: e for t, e in zip(names, outcomes, strict=True) if e is not None}


async def publish(
    producer: Producer,
    rows: Sequence[PendingRow],
    *,
    metadata_bound: float,
    relay: str,
    inflight: list[asyncio.Future[Any]] | None = None,
    known_unavailable: Mapping[str, BaseException] | None = None,
) -> Sent:
    """Send ``rows`` (id order) and wait for every acknowledgement. Returns, per lane, the
    acknowledged rows before the lane's first failed row: marking a later row of a lane
    but not an earlier one would reorder its keys. The caller bounds the time; every send's
    future is appended to ``inflight`` (what a caller that gives up must not leave behind).
    Topics in ``known_unavailable`` (found without metadata by a recent pass) are refused
    without another lookup: a missing topic does not cost every pass the metadata bound."""
    first_failure: dict[int, int] = {}
    refused: set[int] = set()
    refusals: dict[int, Refusal] = {}
    failed_ids: dict[int, list[int]] = {}
    producer_error: BaseException | None = None

    def failed(row: PendingRow, exc: BaseException, *, before_send: bool = False) -> None:
        nonlocal producer_error
        first = row.id <= first_failure.get(row.lane, row.id)
        first_failure[row.lane] = min(row.id, first_failure.get(row.lane, row.id))
        failed_ids.setdefault(row.lane, []).append(row.id)
        if is_record_error(exc):
            refused.add(row.lane)
            if first:
                refusals[row.lane] = Refusal(row.id, exc, row.topic, before_send=before_send)
            logs.event(
                log,
                logging.WARNING,
                "outbox_publish_refused",
                relay=relay,
                outbox_id=row.id,
                topic=row.topic,
                lane=row.lane,
                error=describe(exc),
            )
        elif producer_error is None:
            producer_error = exc
            logs.event(
                log,
                logging.WARNING,
                "outbox_producer_failed",
                relay=relay,
                outbox_id=row.id,
                topic=row.topic,
                error=describe(exc),
            )

    known = dict(known_unavailable or {})
    looked_up = await unavailable_topics(
        producer, {r.topic for r in rows} - known.keys(), metadata_bound
    )
    unavailable = {**known, **looked_up}
    sent: list[tuple[PendingRow, asyncio.Future[Any]]] = []
    for row in rows:
        if producer_error is not None:
            break  # the producer is unusable: the rest waits for the next one
        if row.lane in first_failure:
            continue  # the rest of the lane waits for the next pass anyway
        topic_error = unavailable.get(row.topic)
        if topic_error is not None:
            failed(row, topic_error, before_send=False)
            continue
        try:
            future = await producer.send(
                row.topic,
                value=row.payload.encode("utf-8"),
                key=row.key.encode("utf-8"),
                headers=wire_headers(row.id, row.headers),
            )
        except Exception as exc:  # record too large for the client, producer closed, ...
            failed(row, exc, before_send=True)
            continue
        future.add_done_callback(_retrieve)
        sent.append((row, future))
        if inflight is not None:
            inflight.append(future)
    if sent:
        # asyncio.wait, not gather: a timeout must not cancel the producer's futures.
        await asyncio.wait([f for _, f in sent])
    acked_candidates: list[PendingRow] = []
    placed: dict[int, tuple[int | None, int | None]] = {}
    for row, future in sent:
        if future.cancelled():
            failed(row, asyncio.CancelledError())
            continue
        error = future.exception()
        if error is not None:
            failed(row, error)
        else:
            acked_candidates.append(row)
            meta = future.result()
            placed[row.id] = (getattr(meta, "partition", None), getattr(meta, "offset", None))
    acked = [r for r in acked_candidates if r.id < first_failure.get(r.lane, math.inf)]
    for ids in failed_ids.values():
        ids.sort()
    # Only a lane's first failed row may be parked (a refusal behind a failed producer send
    # is no reason to move anything).
    refusals = {lane: r for lane, r in refusals.items() if r.outbox_id == first_failure[lane]}
    return Sent(
        acked=acked,
        placed=placed,
        failed_lanes=set(first_failure),
        refused_lanes=refused,
        producer_error=producer_error,
        refusals=refusals,
        failed_ids=failed_ids,
        candidates=acked_candidates,
        looked_up_unavailable=looked_up,
    )


class InDoubt(Exception):
    """Kafka acknowledged not every send of a pass within the in-doubt bound."""


async def publish_waiting(
    send: Awaitable[Sent],
    *,
    publish_timeout: float,
    in_doubt_timeout: float,
    keepalive: Callable[[], Awaitable[None]],
    on_in_doubt: Callable[[], None],
) -> Sent:
    """Await one pass's ``send`` (``publish``) for as long as its sends are in doubt.

    A send that Kafka has not acknowledged may still be written: an idempotent producer
    retries it (same producer id and sequence, so never twice) until its partition's
    leader answers, which during a broker failover takes a broker session timeout and an
    election. Giving up on it early and sending its row again would publish the row twice
    as soon as the old send lands. So after ``publish_timeout`` the pass keeps waiting, and
    keeps its session (its lanes) with ``keepalive`` every ``publish_timeout``, up to
    ``in_doubt_timeout`` in all; only then does it raise ``InDoubt`` (the caller rolls back
    and aborts the producer). Cancelling ``send`` never cancels the producer's futures."""
    task = asyncio.ensure_future(send)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + in_doubt_timeout
    try:
        done, _ = await asyncio.wait([task], timeout=min(publish_timeout, in_doubt_timeout))
        if not done:
            on_in_doubt()
        while not done:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise InDoubt(f"no acknowledgement within {in_doubt_timeout:g}s")
            await keepalive()
            done, _ = await asyncio.wait([task], timeout=min(publish_timeout, remaining))
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait([task])

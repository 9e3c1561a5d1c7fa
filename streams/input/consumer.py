"""The shared input loop: batch, decode, dead-letter bad messages, apply with retry, then ack.

Offsets are acknowledged only after a batch is committed to PostgreSQL (events are read without acks),
so a crash or a cancelled batch is redelivered instead of lost (faust issue #606); the
agents run with concurrency 1 so a partition is never processed out of order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from faust.types import EventT, StreamT, TopicT

from db.connector import classify, is_transient
from streams import logs, tracing
from streams.contracts import Contract, ContractError, TopicContract, decode
from streams.dlq.send import DeadLetterFailed, send_to_dlq
from streams.input.acks import InOrderAcks, Ticket
from streams.input.batches import EventBatches
from streams.input.gaps import GapGuard, GapHealer
from streams.input.progress import PartitionProgress, ReasonCounts
from streams.input.repeats import RepeatedFailure, SameFailures
from streams.metrics import AgentMetrics
from streams.tables.cache import LocalStorageError

M = TypeVar("M", bound=Contract)
log = logging.getLogger("streams.input")

BATCH_MAX = 500
BATCH_WITHIN_SECONDS = 0.02
# A partition the stream is behind on (the broker's high watermark past what it delivered)
# for this long without any delivery is read from the broker directly.
TAIL_CHECK_SECONDS = 1.0
TAIL_QUIET_SECONDS = 3.0
# Batches admitted and not acked yet (handled ones wait for an earlier one still in flight):
# beyond this many the loop takes no more, so a stuck batch does not let memory grow.
UNACKED_MAX = 8
RETRY_FIRST_SECONDS = 0.2
RETRY_MAX_SECONDS = 10.0


@dataclass
class Decoded(Generic[M]):
    event: EventT[Any]
    message: M


class ContractConsumer(Generic[M]):
    """Turns a stream of raw events into validated batches for ``apply``.

    ``apply`` gets the decoded messages of one batch (with their events) and must be idempotent (replays happen:
    a batch interrupted after its commit but before the ack is delivered again).
    """

    def __init__(
        self,
        contract: TopicContract[M],
        apply: Callable[[Sequence[Decoded[M]]], Awaitable[object]],
        dlq: TopicT,
        metrics: AgentMetrics,
        *,
        topic_label: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_outcome: Callable[[EventT[Any], str, str | None], None] | None = None,
        pipeline_depth: int = 1,
        agent: str | None = None,
        now: Callable[[], float] = time.time,
        same_failure_attempts: int = 0,
        healthy: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """``pipeline_depth``: batches applied at once. With 2, the next batch is decoded and
        applied while one waits for PostgreSQL; only for an ``apply`` that any commit order
        leaves correct (Version-guarded state: an older state committing after a newer one
        changes nothing; the recipe's applier also writes a key only once no earlier batch
        in flight is writing it). Acks are given in admission order whatever order the batches
        finish in (``streams/input/acks.py``).

        ``same_failure_attempts`` (0 = off) and ``healthy``: a "database unavailable" failure
        that repeats identically (same kind, class and SQLSTATE) that many times in a row
        while ``healthy()`` says the database answers is the input's own: the batch is
        applied one by one and the message that keeps failing is dead-lettered with its
        reason (``RepeatedFailure``). A database that is down fails the probe: retried.
        Contention (another transaction in the way) never counts (``streams/input/repeats.py``)."""
        if same_failure_attempts < 0:
            raise ValueError("same_failure_attempts must be >= 0")
        self.same_failure_attempts = same_failure_attempts
        self.healthy = healthy
        self.contract = contract
        self.apply = apply
        self.dlq = dlq
        self.metrics = metrics
        self.label = topic_label or contract.name
        self._sleep = sleep
        self.gaps: GapGuard[Any] = GapGuard()
        self.on_outcome = on_outcome
        if pipeline_depth < 1:
            raise ValueError("pipeline_depth must be >= 1")
        self.pipeline_depth = pipeline_depth
        self.progress = PartitionProgress()
        self.reasons = ReasonCounts()
        self.acks = InOrderAcks(self._acked)
        self._latency = metrics.processing_latency.labels(agent or self.label)
        self._now = now

    def _acked(self, batch: Sequence[Any]) -> None:
        """A batch committed to PostgreSQL and acked: its partitions moved, and how long
        its oldest message took from its timestamp to here."""
        self.progress.advanced(cast(Any, batch))
        stamps = [s for e in batch if (s := getattr(e.message, "timestamp", None)) is not None]
        if stamps:
            self._latency.observe(max(0.0, self._now() - min(stamps)))

    async def run(self, stream: StreamT[Any]) -> None:
        # Events read without acks (acked here once handled), gathered while batches apply.
        batches = EventBatches(
            cast(Any, stream).noack().events(), BATCH_MAX, within=BATCH_WITHIN_SECONDS
        )
        # Offsets the stream skipped are read from the broker and handled in order, ahead of
        # the record that revealed the jump (streams/input/gaps.py).
        healer = GapHealer(
            stream.app, self.gaps, metrics=self.metrics, label=self.label, sleep=self._sleep
        )
        topics = set(getattr(stream.channel, "topics", ()))
        # Admission (the gap guard's view of offsets, and a batch's place in the ack order)
        # one batch at a time: the stream's batches and the tail watcher's.
        turn = asyncio.Lock()
        self.acks.clear()
        watcher = asyncio.create_task(self._watch_tails(stream.app, healer, topics, turn))
        inflight: set[asyncio.Task[None]] = set()
        incoming = aiter(batches)
        try:
            while True:
                # A slot first, then the batch: the stream buffers meanwhile, so a batch taken
                # while another waits for PostgreSQL is a full one, not the last 20 ms.
                while inflight and (
                    len(inflight) >= self.pipeline_depth or self.acks.waiting >= UNACKED_MAX
                ):
                    done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                    inflight -= done
                    for task in done:
                        task.result()  # a bug in handling crashes the agent, as before
                try:
                    events = await anext(incoming)
                except StopAsyncIteration:
                    break
                async with turn:
                    healer.new_batch()
                    batch: list[EventT[Any]] = []
                    for event in events:
                        batch.extend(await healer.admit(event))
                    inflight.add(self._start(batch))
            for finished in asyncio.as_completed(list(inflight)):
                await finished
        finally:
            for task in inflight:
                task.cancel()  # rolled back and not acked: delivered again
            await asyncio.gather(*inflight, return_exceptions=True)
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await batches.aclose()
            self.acks.clear()  # handled batches behind an unfinished one: delivered again
            await healer.close()

    def _start(self, batch: list[EventT[Any]]) -> asyncio.Task[None]:
        """Handle ``batch`` in a task of its own; it is acked once it and every batch admitted
        before it are handled (call under the admission lock)."""
        return asyncio.create_task(self._handle_and_ack(batch, self.acks.admit(batch)))

    async def _handle_and_ack(self, batch: list[EventT[Any]], ticket: Ticket) -> None:
        await self.handle(batch)
        self.acks.handled(ticket)

    async def _watch_tails(
        self, app: Any, healer: GapHealer, topics: set[str], turn: asyncio.Lock
    ) -> None:
        """Records the broker holds that the stream never delivered, with no later record to
        reveal the jump (a loss on the last records of a partition, e.g. the only record
        of a partition taken over): read and handled after a quiet period."""
        quiet_since: dict[Any, tuple[int, float]] = {}
        while True:
            await asyncio.sleep(TAIL_CHECK_SECONDS)
            try:
                if not app.consumer.started or not app.tables.recovery.completed.is_set():
                    continue
                now = asyncio.get_running_loop().time()
                for tp in [tp for tp in app.consumer.assignment() if tp.topic in topics]:
                    highwater = app.consumer.highwater(tp)
                    expected = healer.expected(tp)
                    if highwater is None or highwater <= expected:
                        quiet_since.pop(tp, None)
                        continue
                    seen = quiet_since.get(tp)
                    if seen is None or seen[0] != expected:
                        quiet_since[tp] = (expected, now)  # behind: start the quiet clock
                        continue
                    if now - seen[1] < TAIL_QUIET_SECONDS:
                        continue
                    async with turn:
                        if healer.expected(tp) != expected:
                            continue  # the stream moved meanwhile
                        tail = await healer.tail(tp, highwater)
                        if tail:
                            await self._start(tail)
                    quiet_since.pop(tp, None)
            except asyncio.CancelledError:
                raise
            except Exception:  # a watcher bug must not stop the agent; the stream goes on
                logs.event(log, logging.ERROR, "tail_watch_failed", topic=self.label, exc_info=True)

    async def handle(self, events: Sequence[EventT[Any]]) -> None:
        """``handle_events`` in the batch's span (topic, partitions, count), which continues
        the first record's incoming trace (streams/tracing)."""
        with tracing.input_span(self.label, events):
            await self.handle_events(events)

    async def handle_events(self, events: Sequence[EventT[Any]]) -> None:
        """Decode, dead-letter what cannot be used, apply the rest; never raises for input.

        Every message ends in exactly one outcome: applied (it changed state), noop (stale,
        replayed or unchanged) or dlq. Only an unwell database, the worker's own store failing
        or an unreachable broker makes this wait (retrying), which holds the partition
        without losing anything.
        """
        good: list[Decoded[M]] = []
        for event in events:
            try:
                good.append(Decoded(event, decode(self.contract, event.message.value)))
            except ContractError as exc:
                await self._dead_letter(event, exc.reason, exc.kind)
            except Exception as exc:  # a decoder bug must not stop the partition either
                logs.event(log, logging.ERROR, "decode_failed", topic=self.label, exc_info=True)
                await self._dead_letter(
                    event, f"message could not be decoded: {type(exc).__name__}", "decode"
                )
        if good:
            await self._apply(good)

    async def _dead_letter(self, event: EventT[Any], reason: str, kind: str) -> None:
        try:
            await send_to_dlq(
                self.dlq,
                event,
                reason,
                kind,
                sleep=self._sleep,
                secret_fields=self.contract.secret_fields,
            )
        except DeadLetterFailed as exc:
            # Kafka refuses every form of the record: it is still in the input topic at
            # these coordinates; say so loudly and let the partition move on.
            msg = event.message
            self.metrics.dlq_failures.labels(self.label).inc()
            logs.event(
                log,
                logging.ERROR,
                "dlq_failed",
                topic=msg.topic,
                partition=msg.partition,
                offset=msg.offset,
                kind=kind,
                error=exc,
            )
        self.metrics.dlq.labels(self.label, kind).inc()
        self.reasons.add(kind, reason)
        self._outcome(event, "dlq", reason)

    def _outcome(self, event: EventT[Any], outcome: str, reason: str | None = None) -> None:
        self.metrics.messages.labels(self.label, outcome).inc()
        if self.on_outcome is not None:
            self.on_outcome(event, outcome, reason)

    def _settle(self, batch: Sequence[Decoded[M]], result: object) -> None:
        positions = getattr(result, "applied_positions", None)
        n = len(batch)
        applied = n if positions is None else sum(1 for i in range(n) if i in positions)
        # Counted once per outcome, not per message (a labelled child's lookup per event).
        messages = self.metrics.messages
        if applied:
            messages.labels(self.label, "applied").inc(applied)
        if n - applied:
            messages.labels(self.label, "noop").inc(n - applied)
        if self.on_outcome is not None:
            for i, item in enumerate(batch):
                on = positions is None or i in positions
                self.on_outcome(item.event, "applied" if on else "noop", None)

    async def _apply(self, batch: list[Decoded[M]]) -> None:
        try:
            result = await self._apply_retrying(batch)
        except Exception as exc:
            # A message the database rejects (or our code cannot handle) must not hold back
            # the others or the partition: apply one by one, dead-letter whichever fails.
            logs.event(
                log,
                logging.WARNING,
                "batch_failed",
                topic=self.label,
                size=len(batch),
                error=type(exc).__name__,
                fallback="one_by_one",
            )
            for item in batch:
                try:
                    one = await self._apply_retrying([item])
                except Exception as exc:
                    logs.event(
                        log,
                        logging.WARNING,
                        "message_failed",
                        topic=self.label,
                        partition=item.event.message.partition,
                        offset=item.event.message.offset,
                        error=type(exc).__name__,
                    )
                    await self._dead_letter(item.event, processing_reason(exc), "processing")
                else:
                    self._settle([item], one)
            return
        self._settle(batch, result)

    async def _apply_retrying(self, messages: list[Decoded[M]]) -> object:
        """Apply, retrying while the database or the worker's local store is unwell (the
        input is fine) until it passes or the worker stops; raises what says the input
        itself is bad."""
        delay = RETRY_FIRST_SECONDS
        same = SameFailures()
        while True:
            try:
                with self.metrics.batch_seconds.labels(self.label).time():
                    return await self.apply(messages)
            except Exception as exc:
                cause = infrastructure(exc)
                if cause is None:
                    raise
                in_a_row = same.add(cause, exc)
                if await self._input_at_fault(cause, in_a_row):
                    raise RepeatedFailure(in_a_row, exc) from exc
                self.metrics.retries.labels(self.label).inc()
                logs.event(
                    log,
                    logging.WARNING,
                    "retry",
                    topic=self.label,
                    size=len(messages),
                    cause=cause,
                    error=type(exc).__name__,
                    sqlstate=getattr(exc, "sqlstate", None) or "-",
                    delay_s=delay,
                )
                await self._sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)

    async def _input_at_fault(self, cause: str, same: int) -> bool:
        """The database answers, yet this work failed the same way ``same`` times."""
        if cause != "database" or self.healthy is None:
            return False
        if not self.same_failure_attempts or same < self.same_failure_attempts:
            return False
        try:
            return await self.healthy()
        except Exception:  # a probe that fails says the database is unwell
            return False


def infrastructure(exc: BaseException) -> str | None:
    """What is unwell when ``exc`` says the infrastructure failed, not the input:
    ``"local_storage"`` (the worker's own store, anywhere in the chain of causes) or
    ``"database"`` (PostgreSQL unavailable or unwell); None when the message itself may be
    at fault (only then may it be dead-lettered)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, LocalStorageError):
            return "local_storage"
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return "database" if is_transient(exc) else None


def processing_reason(exc: BaseException) -> str:
    """A value-free reason: driver messages can quote the offending value, so only the
    error type and SQLSTATE are kept."""
    if isinstance(exc, RepeatedFailure):
        return str(exc)
    if classify(exc) == "rejected":
        state = getattr(exc, "sqlstate", None) or "-"
        return f"database rejected the message (SQLSTATE {state})"
    return f"processing failed: {type(exc).__name__}"

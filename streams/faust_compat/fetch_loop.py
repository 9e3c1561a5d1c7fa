"""Faust's fetch loop without four tasks for every record, and without a one-second stall.

faust-streaming 0.15 (pinned in pyproject.toml) hands each fetched record to the conductor with
``wait_first(callback(message), suspend_flow.wait())``: four futures, an ``asyncio.wait`` and
three cancellations per record, a large share of the worker's CPU under ingest
(docs/benchmarks.md). The callback nearly always finishes without suspending: it decodes the
record and puts the event on the stream's queue, which has room. So ``drain_messages`` runs it
inline up to its first suspension. Finished there: done, no task. Suspended (the queue is full,
the flow is paused for a rebalance, the producer buffer is full): the rest runs under Faust's
``wait_first``, so a suspend or a stop interrupts it exactly as in Faust.

Everything else is Faust's ``Consumer._drain_messages``, step for step (gap marks for skipped
offsets, read offsets, ``commit_every``).

The stall: when a stream's buffer passes its high mark, Faust stops fetching that partition
until the buffer drains below its low mark. Under a steady backlog that happens to every
partition at once, and then ``Consumer._wait_next_records`` sleeps a whole second before it
looks again - while the buffer empties in a fraction of that, so the workers sit idle
through much of a large ingest. ``wait_next_records`` waits for the first partition to have
room again instead (at most the same second).

``install()`` replaces three methods on Faust's base consumer, after ``check()``: it raises
FaustCompatError when a Faust method they copy is not the one it was copied from (its source
hash), or a method or attribute the copies use is gone.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any

from faust.transport import consumer as faust_consumer
from mode import Service

from streams.faust_compat.errors import (
    FAUST,
    MODE,
    FaustCompatError,
    annotated,
    method,
    qualname,
    signature,
    source_sha256,
)

# How long one fetch waits for records of the partitions it asks for. A partition whose
# stream buffer had no room is left out of the fetch; once it has room it is asked for only by
# the next fetch, so the wait bounds how long it idles (Faust waits 1 s; the buffer's low mark,
# 40% of stream_buffer_maxsize, lasts about 0.3 s at 5,000 events/s).
FETCH_WAIT_SECONDS = 0.1

# sha256 of faust-streaming 0.15.3's Consumer._drain_messages and _wait_next_records
# sources, which drain_messages and wait_next_records copy. A Faust upgrade that changes
# either fails check(): compare it with the copy here, carry the change over, then update
# the hash.
FAUST_SHA256 = {
    "_drain_messages": "44a2500309e83c630493f6828af50166ec8d96a0b3e4fb2bab735f704ae93417",
    "_wait_next_records": "6218e1969a636b3ff504ad1b8e7ad58a113572e43d746cc96d684ed5153032c6",
}

# Faust's methods that install() replaced (on_buffer_drop is still called from ours).
_replaced: dict[str, Any] = {}


def run_inline(coro: Coroutine[Any, Any, Any]) -> Coroutine[Any, Any, Any] | None:
    """Run ``coro`` up to its first suspension: None when it finished there (its exceptions
    propagate), else a coroutine that runs the rest when awaited (in a task, or not)."""
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return _finish(coro, yielded)


async def _finish(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    return await _resume(coro, yielded)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    # What ``yield from coro`` does after its first step: pass each future the coroutine
    # waits on to the task driving us, and send it back the outcome.
    try:
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation thrown into the task: pass it on
                yielded = coro.throw(exc)
            else:
                yielded = coro.send(sent)
    except StopIteration as stop:
        return stop.value


async def drain_messages(self: Any, fetcher: Any) -> None:  # pragma: no cover - Faust's loop
    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = self._stopped.is_set
    fetcher_should_stop = fetcher._stopped.is_set

    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    flag_consumer_fetching = faust_consumer.CONSUMER_FETCHING
    set_flag = self.diag.set_flag
    unset_flag = self.diag.unset_flag
    commit_every = self._commit_every
    acks_enabled_for = self.app.topics.acks_enabled_for

    # The third change: give the loop back every 10 records, not 100. Running inline, 100
    # callbacks hold the loop the dispatcher and the relay share for milliseconds (lateness
    # p99 in interleaved runs with 2,000 events/s of ingest: 155/121 ms at 10, 326/162 ms at
    # 100, 193 ms at 1).
    yield_every = 10
    num_since_yield = 0
    sleep = asyncio.sleep

    try:
        while not (consumer_should_stop() or fetcher_should_stop()):
            set_flag(flag_consumer_fetching)
            # The second change: a fetch waits at most FETCH_WAIT_SECONDS for records.
            ait = getmany(timeout=FETCH_WAIT_SECONDS)

            # Sleeping because sometimes getmany is called in a loop
            # never releasing to the event loop
            await self.sleep(0)
            if not self.should_stop:
                async for tp, message in ait:
                    num_since_yield += 1
                    if num_since_yield > yield_every:
                        await sleep(0)
                        num_since_yield = 0

                    offset = message.offset
                    r_offset = get_read_offset(tp)
                    if r_offset is None or offset >= r_offset:
                        gap = offset - (r_offset or 0)
                        # We have a gap in income messages
                        if gap > 1 and r_offset and acks_enabled_for(message.topic):
                            await self._add_gap(tp, r_offset + 1, offset)
                        if commit_every is not None and self._n_acked >= commit_every:
                            self._n_acked = 0
                            await self.commit()
                        # The one change: the callback runs inline; only a callback that
                        # suspends gets Faust's race against a suspended flow.
                        rest = run_inline(callback(message))
                        if rest is not None:
                            await self.wait_first(rest, self.suspend_flow.wait())
                        set_read_offset(tp, offset)
                    else:
                        self.log.dev(
                            "DROPPED MESSAGE ROFF %r: k=%r v=%r",
                            offset,
                            message.key,
                            message.value,
                        )
                unset_flag(flag_consumer_fetching)

    except self.consumer_stopped_errors:
        if self.transport.app.should_stop:
            # we're already stopping so ignore
            self.log.info("Broker stopped consumer, shutting down...")
            return
        raise
    except asyncio.CancelledError:
        if self.transport.app.should_stop:
            # we're already stopping so ignore
            self.log.info("Consumer shutting down for user cancel.")
            return
        raise
    except Exception as exc:
        self.log.exception("Drain messages raised: %r", exc)
        raise
    finally:
        unset_flag(flag_consumer_fetching)


def _room(consumer: Any) -> asyncio.Event:
    """Set when a partition paused for a full stream buffer may be fetched again."""
    event: asyncio.Event | None = getattr(consumer, "_streams_room", None)
    if event is None:
        event = consumer._streams_room = asyncio.Event()
    return event


def on_buffer_drop(self: Any, tp: Any) -> None:
    _replaced["on_buffer_drop"](self, tp)
    _room(self).set()


async def wait_next_records(self: Any, timeout: float) -> tuple[Any, Any]:  # pragma: no cover
    if not self.flow_active:
        await self.wait(self.can_resume_flow)
    try:
        # Set signal that _wait_next_records is waiting on the fetcher service.
        self.not_waiting_next_records.set()
        is_client_only = self.app.client_only
        active_partitions = None if is_client_only else self._get_active_partitions()
        records: Any = {}
        if is_client_only or active_partitions:
            records = await self._getmany(active_partitions=active_partitions, timeout=timeout)
        else:
            # The one change: every partition waits for room in its stream's buffer; look
            # again as soon as one has room (Faust sleeps a whole second here).
            room = _room(self)
            room.clear()
            await self.wait_first(room.wait(), timeout=1.0)
        return records, active_partitions
    finally:
        self.not_waiting_next_records.set()


OURS: dict[str, Any] = {
    "_drain_messages": drain_messages,
    "_wait_next_records": wait_next_records,
    "on_buffer_drop": on_buffer_drop,
}


def faust_method(name: str) -> Any:
    """Faust's own ``Consumer.<name>``: the one install() replaced, or the class's."""
    if name in _replaced:
        return _replaced[name]
    found = vars(faust_consumer.Consumer).get(name)
    if found is None or found is OURS[name]:
        raise FaustCompatError(FAUST, f"{qualname(faust_consumer.Consumer)}.{name}", "is missing")
    return found


def check() -> None:
    """The Faust methods copied here are unchanged, and what the copies use still exists."""
    consumer = faust_consumer.Consumer
    for name, expected in FAUST_SHA256.items():
        source_sha256(faust_method(name), expected, FAUST, f"{qualname(consumer)}.{name}")
    if not isinstance(getattr(faust_consumer, "CONSUMER_FETCHING", None), str):
        raise FaustCompatError(FAUST, "faust.transport.consumer.CONSUMER_FETCHING", "is missing")
    method(consumer, "_add_gap", ["tp", "offset_from", "offset_to"], FAUST)
    method(consumer, "_getmany", ["active_partitions", "timeout"], FAUST)
    method(consumer, "_get_active_partitions", [], FAUST)
    for name in ("_read_offset", "_commit_every", "_n_acked", "not_waiting_next_records"):
        annotated(consumer, name, FAUST)
    annotated(Service, "_stopped", MODE)  # the consumer's and its fetcher's
    drop = f"{qualname(consumer)}.on_buffer_drop"
    signature(faust_method("on_buffer_drop"), ["self", "tp"], FAUST, drop)


def install() -> None:
    """Use these in every Faust consumer of this process (idempotent); raises
    FaustCompatError, before changing anything, when check() fails."""
    check()
    consumer = faust_consumer.Consumer
    for name in OURS:
        _replaced.setdefault(name, faust_method(name))
    consumer._drain_messages = drain_messages  # type: ignore[method-assign]
    consumer._wait_next_records = wait_next_records  # type: ignore[method-assign]
    consumer.on_buffer_drop = on_buffer_drop  # type: ignore[method-assign]

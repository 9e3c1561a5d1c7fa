"""The real worker (``python -m streams worker``) with test hooks around Faust, for gap e2e tests.

Environment (all optional):

- ``GAP_TEST_DROP=<partition>:<start>:<end>``: the first time Faust's ``getmany`` yields an
  offset in ``[start, end)`` of that partition of the calendar input topic, it is thrown
  away - what faust-streaming 0.15 does to fetched records when a rebalance toggles the
  flow (they are fetched, the fetch position moves past them, they never reach the stream).
- ``GAP_TEST_HOLD=<partition>:<offset>``: a batch holding that offset blocks in the applier
  (before anything is written) and logs ``GAPTEST hold``; SIGUSR2 releases it. The re-read
  of the gap is then in flight.
- Every ``Consumer.commit()`` call (Faust commits on a timer) logs ``GAPTEST commit``, so a
  test can wait for commits to have been attempted instead of sleeping.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from faust.transport import consumer as faust_consumer

from streams.cli import main
from streams.slices.calendar import events as calendar_events

INPUT = "pin.calendar.events.v1"


def _ints(name: str) -> list[int] | None:
    raw = os.environ.get(name)
    return [int(p) for p in raw.split(":")] if raw else None


def install() -> None:
    topic = os.environ.get("TOPIC_PREFIX", "") + INPUT
    drop = _ints("GAP_TEST_DROP")
    hold = _ints("GAP_TEST_HOLD")

    if drop is not None:
        partition, start, end = drop
        dropped: set[int] = set()
        getmany = faust_consumer.Consumer.getmany

        async def dropping_getmany(self: Any, timeout: float) -> AsyncIterator[tuple[Any, Any]]:
            async for tp, message in getmany(self, timeout):
                offset = message.offset
                if (
                    tp.topic == topic
                    and tp.partition == partition
                    and start <= offset < end
                    and offset not in dropped
                ):
                    dropped.add(offset)
                    print(f"GAPTEST dropped offset={offset}", flush=True)
                    continue
                yield tp, message

        faust_consumer.Consumer.getmany = dropping_getmany  # type: ignore[method-assign]

    commit = faust_consumer.Consumer.commit

    async def counting_commit(self: Any, *args: Any, **kwargs: Any) -> bool:
        result = await commit(self, *args, **kwargs)
        print("GAPTEST commit", flush=True)
        return bool(result)

    faust_consumer.Consumer.commit = counting_commit  # type: ignore[method-assign]

    if hold is not None:
        hold_partition, hold_offset = hold
        apply = calendar_events.CalendarEventsApplier.__call__

        async def holding_apply(self: Any, batch: Sequence[Any]) -> Any:
            if any(
                d.event.message.partition == hold_partition
                and d.event.message.offset == hold_offset
                for d in batch
            ):
                released = asyncio.Event()
                asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, released.set)
                print(f"GAPTEST hold offset={hold_offset}", flush=True)
                await released.wait()
                print("GAPTEST released", flush=True)
            return await apply(self, batch)

        calendar_events.CalendarEventsApplier.__call__ = holding_apply  # type: ignore[method-assign]


if __name__ == "__main__":
    install()
    sys.exit(main(["worker"]))

"""The fetch loop's inline callback (streams/agents/drain.py): same outcomes as a task, and
the Faust loop it copies is still the one it was copied from."""

from __future__ import annotations

import asyncio
import hashlib
import inspect

import pytest

from streams.agents import drain

# sha256 of faust-streaming 0.15.3's Consumer._drain_messages source. A Faust upgrade that
# changes the loop fails here: compare it with drain.drain_messages, carry the change over,
# then update the hash.
FAUST_DRAIN_SHA256 = "44a2500309e83c630493f6828af50166ec8d96a0b3e4fb2bab735f704ae93417"


# The same for Consumer._wait_next_records, which drain.wait_next_records copies.
FAUST_WAIT_SHA256 = "6218e1969a636b3ff504ad1b8e7ad58a113572e43d746cc96d684ed5153032c6"


def test_the_copied_faust_loop_has_not_changed() -> None:
    source = inspect.getsource(drain.ORIGINAL)
    assert hashlib.sha256(source.encode()).hexdigest() == FAUST_DRAIN_SHA256


def test_the_copied_faust_wait_has_not_changed() -> None:
    source = inspect.getsource(drain.ORIGINAL_WAIT)
    assert hashlib.sha256(source.encode()).hexdigest() == FAUST_WAIT_SHA256


async def test_a_callback_that_does_not_suspend_finishes_inline() -> None:
    seen: list[int] = []

    async def callback(n: int) -> None:
        seen.append(n)

    assert drain.run_inline(callback(1)) is None
    assert seen == [1]


async def test_its_exception_propagates_at_once() -> None:
    async def callback() -> None:
        raise ValueError("decode failed")

    with pytest.raises(ValueError):
        drain.run_inline(callback())


async def test_a_callback_that_suspends_is_finished_by_awaiting_the_rest() -> None:
    room = asyncio.Event()
    steps: list[str] = []

    async def callback() -> str:
        steps.append("before")
        await room.wait()  # the stream's queue is full
        steps.append("after")
        await asyncio.sleep(0)
        return "put"

    rest = drain.run_inline(callback())
    assert rest is not None and steps == ["before"]
    task = asyncio.ensure_future(rest)
    await asyncio.sleep(0)
    assert not task.done()
    room.set()
    assert await task == "put" and steps == ["before", "after"]


async def test_a_suspended_callback_is_cancelled_like_a_task() -> None:
    cleaned: list[bool] = []

    async def callback() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(True)

    rest = drain.run_inline(callback())
    assert rest is not None
    task = asyncio.ensure_future(rest)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


async def test_a_suspended_callback_loses_the_race_to_a_suspended_flow() -> None:
    # What Faust's wait_first does with it: the first to finish wins, the other is cancelled.
    suspend_flow = asyncio.Event()

    async def callback() -> None:
        await asyncio.Event().wait()

    rest = drain.run_inline(callback())
    assert rest is not None
    put = asyncio.ensure_future(rest)
    flow = asyncio.ensure_future(suspend_flow.wait())
    suspend_flow.set()
    done, _ = await asyncio.wait({put, flow}, return_when=asyncio.FIRST_COMPLETED)
    assert done == {flow}
    put.cancel()
    await asyncio.gather(put, return_exceptions=True)
    assert put.cancelled()

"""The fetch loop's inline callback (streams/faust_compat/fetch_loop.py): same outcomes as a
task. That the Faust loop it copies is unchanged is checked by fetch_loop.check()
(tests/unit/test_faust_compat.py)."""

from __future__ import annotations

import asyncio

import pytest

from streams.faust_compat import fetch_loop as drain


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

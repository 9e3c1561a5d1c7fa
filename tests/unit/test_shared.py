"""Shared (streams/asynctools.py): one run at a time, shared by every caller meanwhile, reused
while fresh; a failure is shared and not reused."""

from __future__ import annotations

import asyncio

import pytest

from streams.asynctools import Shared


async def test_concurrent_callers_share_one_run_and_a_fresh_result_is_reused() -> None:
    runs = 0
    gate = asyncio.Event()

    async def make() -> int:
        nonlocal runs
        runs += 1
        await gate.wait()
        return runs

    shared = Shared(make, fresh=60)
    callers = [asyncio.ensure_future(shared.get()) for _ in range(50)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*callers) == [1] * 50
    assert await shared.get() == 1 and runs == 1
    shared.fresh = 0
    assert await shared.get() == 2  # stale: made again


async def test_a_failure_is_shared_then_made_again() -> None:
    calls = 0

    async def make() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("down")
        return calls

    shared = Shared(make, fresh=60)
    results = await asyncio.gather(shared.get(), shared.get(), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results) and calls == 1
    assert await shared.get() == 2


async def test_a_cancelled_caller_does_not_cancel_the_run_for_the_others() -> None:
    gate = asyncio.Event()

    async def make() -> str:
        await gate.wait()
        return "done"

    shared = Shared(make, fresh=60)
    first, second = asyncio.ensure_future(shared.get()), asyncio.ensure_future(shared.get())
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert await second == "done"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_new_stamp_makes_it_again_however_fresh() -> None:
    runs, generation = 0, 0

    async def make() -> int:
        nonlocal runs
        runs += 1
        return runs

    shared = Shared(make, fresh=60, stamp=lambda: generation)
    assert await shared.get() == 1 and await shared.get() == 1
    generation += 1  # an action changed what the page shows
    assert await shared.get() == 2 and await shared.get() == 2

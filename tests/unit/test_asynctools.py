"""in_flight: results in order, never more than the limit running, the first failure cancels
the rest and is raised as it was (a caller tells an unwell database apart by its type)."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from devkit.harness.timer_fakes import quiescent
from streams.asynctools import in_flight


async def test_results_come_in_order_with_at_most_the_limit_running() -> None:
    running, most = 0, 0
    release, two = asyncio.Event(), asyncio.Event()

    async def job(i: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if running == 2:
            two.set()
        await release.wait()
        running -= 1
        return i * 10

    task = asyncio.ensure_future(in_flight([job(i) for i in range(7)], 2))
    await two.wait()
    await quiescent()  # room for a third to start, if the limit let it
    assert running == 2
    release.set()
    assert await task == [0, 10, 20, 30, 40, 50, 60]
    assert most == 2


async def test_the_first_failure_cancels_the_rest_and_is_raised_as_is() -> None:
    cancelled: list[int] = []
    started: list[int] = []

    async def job(i: int) -> int:
        started.append(i)
        try:
            if i == 1:
                raise KeyError("bad")
            await asyncio.sleep(3600)
            return i
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a job never started is closed
        with pytest.raises(KeyError):
            await in_flight([job(i) for i in range(5)], 2)
        gc.collect()
    # Whatever had started (job 1's slot went to job 2) was cancelled; the rest never ran.
    assert 1 in started and len(started) < 5
    assert sorted(cancelled) == sorted(set(started) - {1})

"""Waiting on a signal in tests: poll a condition until it holds, with a deadline that fails."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


class NotWithin(AssertionError):
    """The condition did not hold before the deadline (a failed wait, not a failed probe)."""


@overload
async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    timeout: float,
    what: str,
    until: Callable[[T], object] = ...,
    interval: float = ...,
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T],
    *,
    timeout: float,
    what: str,
    until: Callable[[T], object] = ...,
    interval: float = ...,
) -> T: ...


async def eventually(
    probe: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    until: Callable[[Any], object] = bool,
    interval: float = 0.05,
) -> Any:
    """Call ``probe`` (sync or async) until ``until(value)`` holds (by default: the value
    is truthy) and return that value.

    Fails with ``NotWithin`` (an ``AssertionError``) naming ``what`` and the last value
    seen once ``timeout`` seconds have passed. The probe is always called at least once,
    and once more at the deadline, so a slow probe cannot end the wait without a last
    look. An exception raised by the probe (say, a worker died) ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if until(value):
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NotWithin(f"{what}: not within {timeout}s (last value: {value!r})")
        await asyncio.sleep(min(interval, remaining))

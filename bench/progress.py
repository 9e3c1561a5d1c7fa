"""A tiny progress bar on stderr for the bench's long phases (seeding, waiting for a worker).

On a terminal it redraws one line in place; otherwise (CI logs, a pipe) it prints a plain
line now and then and one at the end, so a log shows progress without a wall of updates.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TextIO, TypeVar

T = TypeVar("T")

WIDTH = 28
QUIET_UNDER = 1.0  # seconds: in a log, a phase shorter than this prints nothing


def render(
    label: str, done: float, total: float | None, elapsed: float, unit: str = "", width: int = WIDTH
) -> str:
    """One line: label, bar, percent, counts, elapsed seconds (no bar when the total is unknown)."""
    count = f"{done:,.0f}" + (f"/{total:,.0f}" if total else "") + (f" {unit}" if unit else "")
    if not total:
        return f"{label}  {count}  {elapsed:.1f} s" if done else f"{label}  {elapsed:.1f} s"
    share = min(max(done / total, 0.0), 1.0)
    filled = int(share * width)
    bar = "#" * filled + "." * (width - filled)
    return f"{label}  [{bar}] {share * 100:3.0f}%  {count}  {elapsed:.1f} s"


class Progress:
    """``with Progress("seeding", total=10_000_000, unit="rows") as p: p.update(n)``."""

    def __init__(
        self,
        label: str,
        total: float | None = None,
        *,
        unit: str = "",
        stream: TextIO | None = None,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        redraw_every: float = 0.2,
        line_every: float = 15.0,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = tty if tty is not None else _isatty(self.stream)
        self.clock = clock
        self.redraw_every = redraw_every if self.tty else line_every
        self.started = clock()
        self.done = 0.0
        # A log gets its first line after ``line_every`` (short phases: only the final line).
        self._shown_at: float | None = None if self.tty else self.started
        self._width = 0
        self._closed = False

    def update(self, done: float) -> None:
        """Set the count done so far (absolute)."""
        self.done = done
        now = self.clock()
        if self._shown_at is None or now - self._shown_at >= self.redraw_every:
            self._show(now)

    def advance(self, n: float = 1) -> None:
        self.update(self.done + n)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        now = self.clock()
        if self.tty or now - self.started >= QUIET_UNDER:  # a log skips phases over in a blink
            self._show(now, final=True)

    def _show(self, now: float, final: bool = False) -> None:
        text = render(self.label, self.done, self.total, now - self.started, self.unit)
        self._shown_at = now
        if self.tty:
            pad = " " * max(0, self._width - len(text))
            self.stream.write(f"\r{text}{pad}" + ("\n" if final else ""))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def spin(label: str, work: Awaitable[T], every: float = 1.0) -> T:
    """Await one long step (a statement, a process) with its elapsed time shown meanwhile."""
    task = asyncio.ensure_future(work)
    with Progress(label) as progress:
        while not task.done():
            await asyncio.wait([task], timeout=every)
            progress.update(0)
    return task.result()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False

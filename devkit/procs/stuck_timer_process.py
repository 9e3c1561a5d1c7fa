"""A timer process whose one schedule gets stuck, for the supervisor's watch tests.

It is the real child's machinery on a small scale: a real TimerRegistry (one every-instance
schedule, ``stuck``, every second, max duration 0.5 s) reporting its turns to the real
Progress, beaten by the real child's ``beat()``. A wake-up makes the next run hang in an
await that swallows its cancellation (a bug), so the registry's loop never turns again
while the event loop, the beat and stdin go on. ``stop`` (or end-of-file) ends it.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

from streams.timer_process import wire
from streams.timer_process.child import _pipes, beat, sender
from streams.timer_process.progress import Progress
from streams.timers import Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext


class Stuck:
    def __init__(self) -> None:
        self.hang = False

    async def run_once(self, ctx: RunContext) -> None:
        if not self.hang:
            return
        forever = asyncio.Event()
        while True:
            try:
                await forever.wait()
            except asyncio.CancelledError:
                continue  # the bug: its max duration cancels it, it waits on


async def main() -> None:
    handler = Stuck()
    registry = TimerRegistry(environ={})
    registry.register(
        Schedule(
            name="stuck",
            handler=handler,
            max_duration=timedelta(seconds=0.5),
            mode=Mode.EVERY_INSTANCE,
            interval=timedelta(seconds=1),
        )
    )
    progress = Progress()
    registry.report_turns(progress.turn)
    reader, writer = await _pipes(0, 1)
    stopping = asyncio.Event()
    await registry.start()
    writer.write(wire.encode({"op": "ready", "pid": os.getpid()}))
    beating = asyncio.create_task(beat(sender(writer, stopping), progress, 0.1, stopping))
    while line := await reader.readline():
        message = wire.decode(line)
        if message["op"] == "wake":
            handler.hang = True
            registry.wake("stuck")
        elif message["op"] == "stop":
            break
    stopping.set()
    await beating
    os._exit(0)  # the stuck run cannot be stopped; the process can


if __name__ == "__main__":
    asyncio.run(main())

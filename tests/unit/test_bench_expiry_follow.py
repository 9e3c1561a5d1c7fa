"""The expiry bench's bare publisher (bench/expiry_bare.py ``follow``) publishes every row the
writer commits, including those committed while it waits, and stops only after the writer
has finished and a later pass found nothing."""

from __future__ import annotations

import asyncio

from bench.expiry_bare import follow


class Outbox:
    """Rows committed by a writer and taken by the publisher's passes."""

    def __init__(self) -> None:
        self.committed = 0
        self.published = 0
        self.passed = asyncio.Event()

    async def publish_pass(self) -> int:
        n = self.committed - self.published
        self.published += n
        await asyncio.sleep(0)  # a pass yields to the writer, as a real one does
        self.passed.set()
        return n


async def test_publishes_what_the_writer_commits_while_it_waits_and_after_it_finished() -> None:
    outbox, wrote, finished = Outbox(), asyncio.Event(), asyncio.Event()

    async def writer() -> None:
        for batch in (3, 0, 5, 2):
            await asyncio.sleep(0)
            outbox.committed += batch
            wrote.set()
        outbox.committed += 4  # the last statement commits, then the writer says it is done
        finished.set()
        wrote.set()

    rows, _ = await asyncio.gather(follow(outbox.publish_pass, wrote, finished), writer())

    assert rows == outbox.committed == 14


async def test_a_pass_that_finds_nothing_waits_for_the_writer_instead_of_ending() -> None:
    outbox, wrote, finished = Outbox(), asyncio.Event(), asyncio.Event()
    publisher = asyncio.create_task(follow(outbox.publish_pass, wrote, finished))
    await outbox.passed.wait()
    await asyncio.sleep(0)  # the publisher goes on from its empty pass
    assert not publisher.done()

    outbox.committed = 7
    finished.set()
    wrote.set()

    assert await asyncio.wait_for(publisher, 5) == 7


async def test_rows_committed_during_a_pass_that_found_nothing_are_still_published() -> None:
    """The writer's last commit and its "finished" land while a pass that found nothing is
    still running: that pass says nothing of the last rows, so another pass must follow."""
    outbox, wrote, finished = Outbox(), asyncio.Event(), asyncio.Event()

    async def pass_while_the_writer_finishes() -> int:
        n = outbox.committed - outbox.published
        if not finished.is_set():
            outbox.committed += 4
            finished.set()
            wrote.set()
        outbox.published += n
        return n

    assert await follow(pass_while_the_writer_finishes, wrote, finished) == 4

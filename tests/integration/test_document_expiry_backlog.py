"""The backlog gauge after a run (seed 001: Active documents in the window whose crossed
threshold has no marker), counted by the ledger: after a clean run only the documents
written since the scan began are checked (they are the only ones that can still owe a
reminder), after any other run every document of the window is."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from devkit.harness.profile import SLOT, Harness, marks, person_document
from streams.slices.profile.work import InlineFanout
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


@pytest.fixture
async def h(database_url: str) -> AsyncIterator[Harness]:
    harness = Harness(database_url)
    yield harness
    await harness.close()


class WritesAfterTheScan(InlineFanout):
    """The inline fan-out, and once the scan has ended (the run closes its fan-out) the given
    writes land: documents the scan can no longer hand out."""

    def __init__(self, h: Harness, after_scan: Callable[[], Awaitable[None]]) -> None:
        super().__init__(h.owners)
        self.after_scan = after_scan

    async def close(self) -> None:
        await self.after_scan()


async def test_a_clean_run_counts_the_documents_written_during_it(
    h: Harness, pool: asyncpg.Pool
) -> None:
    """Owners done, none failed: the documents it reminded are not owed; a document that
    came in, and one that moved into the window, after the scan went past are."""
    reminded = [person_document(DaysLeft=d) for d in (2, 5, 9, 20)]
    moved = person_document(DaysLeft=45)  # outside the window when the scan runs
    await h.apply(*reminded, moved)
    late = person_document(DaysLeft=6)

    async def after_scan() -> None:
        await h.apply(late, {**moved, "Version": 2, "ExpiresAt": "2026-06-13"})

    result = await h.run(WritesAfterTheScan(h, after_scan)).run_once(
        RunContext.at(SLOT, clock=h.runtime.clock)
    )
    assert (result.owners_total, result.owners_done, result.owners_failed) == (4, 4, 0)
    assert result.reminders_sent == 4
    assert result.backlog == 2
    marked = {d for d, _ in await marks(pool)}
    assert {d["DocumentId"] for d in reminded} <= marked
    assert not {late["DocumentId"], moved["DocumentId"]} & marked
    # The next run reminds them, and owes nothing after it.
    again = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    assert (again.reminders_sent, again.backlog) == (2, 0)


async def test_a_document_rewritten_during_a_clean_run_is_checked_again(
    h: Harness, pool: asyncpg.Pool
) -> None:
    """A reminded document whose new Version lands after the scan, still in the window and
    still marked for its threshold, is checked and owes nothing; one that crossed a new
    threshold since (its ExpiresAt moved closer) owes that one."""
    same = person_document(DaysLeft=5)
    closer = person_document(DaysLeft=20)
    await h.apply(same, closer)

    async def after_scan() -> None:
        changed: list[dict[str, Any]] = [
            {**same, "Version": 2, "Type": "Passport"},
            {**closer, "Version": 2, "ExpiresAt": "2026-06-11"},  # DaysLeft 1
        ]
        await h.apply(*changed)

    result = await h.run(WritesAfterTheScan(h, after_scan)).run_once(
        RunContext.at(SLOT, clock=h.runtime.clock)
    )
    assert (result.owners_done, result.owners_failed, result.reminders_sent) == (2, 0, 2)
    assert result.backlog == 1

"""Acks in admission order, whatever order the batches finish in.

Why: Faust's commit is not guarded against acks out of order. The offsets its fetch loop saw
skipped (a jump: transaction markers, or records lost and re-read into an earlier batch by
``streams/input/gaps.py``) count as acked as soon as any later offset is, and it commits from
one past its committed offset. With two batches in flight, the second acked while the first
still waits for PostgreSQL would let the committed offset pass records not yet processed
(CI saw it: tests/e2e/test_input_gaps.py). So a batch is acked once it and every batch
admitted before it are handled; its slot for handling is free as soon as it is handled.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol


class Ackable(Protocol):
    def ack(self) -> object: ...


class Ticket:
    """One admitted batch's place in the ack order."""

    __slots__ = ("batch", "handled")

    def __init__(self, batch: Sequence[Ackable]) -> None:
        self.batch = batch
        self.handled = False


class InOrderAcks:
    def __init__(self, on_acked: Callable[[Sequence[Ackable]], None] = lambda batch: None) -> None:
        self._queue: deque[Ticket] = deque()
        self._on_acked = on_acked

    @property
    def waiting(self) -> int:
        """Batches admitted and not acked yet (being handled, or waiting for an earlier one)."""
        return len(self._queue)

    def admit(self, batch: Sequence[Ackable]) -> Ticket:
        ticket = Ticket(batch)
        self._queue.append(ticket)
        return ticket

    def handled(self, ticket: Ticket) -> None:
        """``ticket``'s batch is handled: ack it and the handled ones behind it, if every batch
        before it is acked. A batch never handled (failed, cancelled) holds back all after it."""
        ticket.handled = True
        queue = self._queue
        while queue and queue[0].handled:
            batch = queue.popleft().batch
            for event in batch:
                event.ack()
            self._on_acked(batch)

    def clear(self) -> None:
        """Forget every batch not acked (a stopping loop: they are delivered again)."""
        self._queue.clear()

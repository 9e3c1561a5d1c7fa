"""Detects offsets that never reached the stream and asks to re-read them (self-healing input).

Why: with a changelog-backed table, faust-streaming 0.15 can lose fetched records in the
worker during the recovery that follows a rebalance (records discarded between fetch
and delivery while the flow is toggled; reproduced here about one time in two when a
worker is killed mid-stream and another takes over). The stream then sees offsets jump
(…, 40, 68, …). Committed offsets never pass such a gap (faust commits only runs of
acked offsets), so the records would come back after a restart; this guard makes the
worker re-read them at once: it seeks the partition back to the first missing offset
and drops (acks, without processing) the already-queued records after the gap until
the re-read reaches it. A gap that is still there after ``max_seeks`` re-reads is real
(a compacted or truncated topic) and is accepted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

log = logging.getLogger("streams.agents.gaps")

P = TypeVar("P")  # a partition identifier (faust TP in production, anything hashable in tests)


class Verdict(Enum):
    PROCESS = "process"
    # Not processed (it comes again with the re-read): seek the partition back to
    # ``GapGuard.seek_target``. Faust keeps delivering records it had already fetched
    # after a seek and then drops the re-read ones as "already read", so the seek is
    # repeated until the first missing offset arrives.
    SEEK = "seek"


@dataclass
class _Healing:
    target: int  # the first offset that never arrived
    seeks: int = 0  # seeks issued so far (one per batch at most)


class GapGuard(Generic[P]):
    """Per-partition expectation of the next offset; pure bookkeeping, no I/O."""

    def __init__(self, max_seeks: int = 50) -> None:
        self.max_seeks = max_seeks
        self._next: dict[P, int] = {}
        self._healing: dict[P, _Healing] = {}
        self.gaps_detected = 0
        self.gaps_accepted = 0

    def reset(self) -> None:
        """Forget expectations (after a rebalance positions restart from committed offsets)."""
        self._next.clear()
        self._healing.clear()

    def healing(self, partition: P) -> bool:
        """Is ``partition`` waiting for a re-read (a later record may have healed it)?"""
        return partition in self._healing

    def seek_target(self, partition: P) -> int:
        """The offset to seek ``partition`` to; call once per seek actually issued."""
        healing = self._healing[partition]
        healing.seeks += 1
        return healing.target

    def admit(self, partition: P, offset: int) -> Verdict:
        healing = self._healing.get(partition)
        if healing is not None:
            if offset <= healing.target:
                if offset == healing.target:
                    del self._healing[partition]
                    log.info("action=gap_healed partition=%s offset=%d", partition, offset)
                self._next[partition] = offset + 1
                return Verdict.PROCESS
            if healing.seeks >= self.max_seeks:
                # The re-read keeps starting after the target: those offsets are not on
                # the broker (compacted or truncated topic). Accept the gap.
                del self._healing[partition]
                self._next[partition] = offset + 1
                self.gaps_accepted += 1
                log.error(
                    "action=gap_accepted partition=%s from=%d to=%d seeks=%d",
                    partition,
                    healing.target,
                    offset,
                    healing.seeks,
                )
                return Verdict.PROCESS
            return Verdict.SEEK
        expected = self._next.get(partition)
        if expected is None or offset <= expected:
            # First sight, the next one, or a replay (rewind to committed offsets).
            self._next[partition] = offset + 1
            return Verdict.PROCESS
        self._healing[partition] = _Healing(target=expected)
        self.gaps_detected += 1
        log.warning(
            "action=gap_detected partition=%s expected=%d got=%d", partition, expected, offset
        )
        return Verdict.SEEK

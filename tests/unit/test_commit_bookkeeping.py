"""Faust's commit bookkeeping after the gap healer filled a gap (streams/faust_compat/commits.py):
the committed offset moves to the end of what was acked in one commit, not one offset per
commit; acks below the committed offset change nothing."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from faust.transport import consumer as faust_consumer
from intervaltree import IntervalTree

from streams.faust_compat import FaustCompatError, commits

TP = "calendar-events-2"


def bookkeeping(committed: int | None) -> Any:
    """The four attributes of a Faust consumer that ``_new_offset`` reads and writes."""
    book = SimpleNamespace(
        _acked=defaultdict(list),
        _acked_index=defaultdict(set),
        _gap=defaultdict(IntervalTree),
        _committed_offset=defaultdict(lambda: None),
    )
    book._committed_offset[TP] = committed
    return book


def ack(book: Any, offsets: range | list[int]) -> None:
    for offset in offsets:  # what Consumer.ack stores
        book._acked[TP].append(offset)
        book._acked_index[TP].add(offset)


def commits_made(book: Any, new_offset: Any, rounds: int) -> list[int | None]:
    """The offsets ``rounds`` commits would write, as Consumer.commit moves on after each."""
    out = []
    for _ in range(rounds):
        offset = new_offset(book, TP)
        if offset is not None and (
            book._committed_offset[TP] is None or offset > book._committed_offset[TP]
        ):
            book._committed_offset[TP] = offset
            out.append(offset)
        else:
            out.append(None)
    return out


def filled_gap(committed: int) -> Any:
    # The fetch loop saw 389 then 598 (records lost in the worker: a gap 390..597 in its
    # tree); the healer read 390..597 from the broker, and they were acked with 598..619.
    book = bookkeeping(committed)
    book._gap[TP].addi(390, 598)
    ack(book, range(390, 620))
    return book


def test_faust_alone_crawls_one_offset_per_commit_after_a_filled_gap() -> None:
    # The bug the wrapper exists for: if this ever fails, Faust fixed it (see commits.py).
    book = filled_gap(390)
    own = commits.faust_method()
    assert commits_made(book, own, 4) == [391, 392, 393, 394]


def test_one_commit_passes_a_filled_gap() -> None:
    book = filled_gap(390)
    assert commits_made(book, commits.new_offset, 2) == [620, None]
    assert not book._gap[TP]
    assert not book._acked[TP]
    assert not book._acked_index[TP]


def test_acks_below_the_committed_offset_are_dropped() -> None:
    # Acked while Faust had no committed offset for the partition (before its seek), and the
    # group's committed offset turned out higher.
    book = bookkeeping(None)
    ack(book, range(0, 369))
    book._committed_offset[TP] = 433
    ack(book, range(433, 450))
    assert commits_made(book, commits.new_offset, 1) == [450]
    assert not book._acked_index[TP]


def test_a_hole_not_yet_acked_still_holds_the_commit_back() -> None:
    book = bookkeeping(100)
    ack(book, [100, 101, 105, 106])  # 102..104 still being applied, no gap for them
    assert commits_made(book, commits.new_offset, 2) == [102, None]


def test_an_unfilled_gap_is_committed_over_as_faust_does() -> None:
    # Offsets with no record (transaction markers): in the gap tree, never acked.
    book = bookkeeping(10)
    book._gap[TP].addi(12, 15)
    ack(book, [10, 11, 15, 16])
    assert commits_made(book, commits.new_offset, 1) == [17]


def test_a_changed_faust_method_fails_the_check_and_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def changed(self: Any, tp: Any) -> int | None:
        return None

    monkeypatch.setattr(faust_consumer.Consumer, commits.NAME, changed)
    monkeypatch.setattr(commits, "_replaced", {})
    with pytest.raises(FaustCompatError, match="_new_offset"):
        commits.install()
    assert vars(faust_consumer.Consumer)[commits.NAME] is changed


def test_install_wraps_once(monkeypatch: pytest.MonkeyPatch) -> None:
    own = commits.faust_method()  # Faust's, whether or not installed already
    monkeypatch.setattr(faust_consumer.Consumer, commits.NAME, own)
    monkeypatch.setattr(commits, "_replaced", {})
    commits.install()
    commits.install()
    assert vars(faust_consumer.Consumer)[commits.NAME] is commits.new_offset
    assert commits._replaced == {commits.NAME: own}
    commits.check()

"""Faust's commit bookkeeping without duplicate offsets: each commit moves to the end of what
was acked, not one offset at a time.

faust-streaming 0.15's ``Consumer._new_offset`` (what the next commit is) adds the offsets
its fetch loop saw skipped (its gap tree, ``_gap``) to the partition's acked offsets, sorts
them, and commits up to the end of their first run of consecutive numbers. An offset that is
both in the gap tree and acked - a record the gap healer (streams/input/gaps.py) read from
the broker itself and acked - is then in the list twice, and a duplicate ends a run: after a
gap of N records was filled, each commit moved the committed offset by one, so it took N
commit intervals to pass the gap while the worker was long done with it (seen after
SIGKILLs: a partition's committed offset 359 records behind its applied end, minutes after
the last restart; tests/unit/test_commit_bookkeeping.py). Faust also leaves the last offset
of a merged gap in the tree (it chops up to, not past, it), so the next commit adds it again.
Offsets acked before Faust knew the committed offset (it keeps None until its seek after an
assignment), and so below it, have the same effect.

``install()`` wraps ``_new_offset``: first the gap ranges up to the highest acked offset are
merged into the acked offsets here - a set, so no offset twice - and chopped off the tree,
past their last offset; offsets below the committed one are dropped (done already). Faust's
own method then finds no gap to add and works on a clean list, so what it commits is
unchanged otherwise. ``check()`` fails when Faust's method is not the one this was made for.
"""

from __future__ import annotations

from typing import Any

from faust.transport import consumer as faust_consumer

from streams.faust_compat.errors import FAUST, FaustCompatError, annotated, qualname, source_sha256

# sha256 of faust-streaming 0.15.3's Consumer._new_offset source, which wrapped() prepares
# the input of. A Faust upgrade that changes it fails check(): see whether the duplicates
# are still possible, then update the hash.
FAUST_SHA256 = "1d2c7ea89a7ad4f1a216c1d51936e569162cd66bd56f889e13fd29c910b58eb0"
NAME = "_new_offset"

_replaced: dict[str, Any] = {}


def merge_acked(consumer: Any, tp: Any) -> None:
    """Merge ``tp``'s gap ranges up to its highest acked offset into its acked offsets, each
    offset once, none below the committed offset; chop them off the gap tree."""
    acked: list[int] = consumer._acked[tp]
    if not acked:
        return
    merged = set(acked)
    top = max(merged)
    gaps = consumer._gap[tp]
    if gaps:
        found = gaps.overlap(0, top)
        if found:
            for interval in found:
                merged.update(range(interval.begin, interval.end))
            gaps.chop(0, max(merged) + 1)
    committed = consumer._committed_offset[tp]
    if committed is not None:
        done = {offset for offset in merged if offset < committed}
        if done:
            merged -= done
            consumer._acked_index[tp].difference_update(done)
    acked[:] = sorted(merged)


def new_offset(self: Any, tp: Any) -> int | None:
    merge_acked(self, tp)
    result: int | None = faust_method()(self, tp)
    return result


def faust_method() -> Any:
    """Faust's own ``Consumer._new_offset``: the one install() wrapped, or the class's."""
    if NAME in _replaced:
        return _replaced[NAME]
    found = vars(faust_consumer.Consumer).get(NAME)
    if found is None or found is new_offset:
        raise FaustCompatError(FAUST, f"{qualname(faust_consumer.Consumer)}.{NAME}", "is missing")
    return found


def check() -> None:
    consumer = faust_consumer.Consumer
    source_sha256(faust_method(), FAUST_SHA256, FAUST, f"{qualname(consumer)}.{NAME}")
    for name in ("_acked", "_acked_index", "_gap", "_committed_offset"):
        annotated(consumer, name, FAUST)


def install() -> None:
    """Wrap Faust's ``_new_offset`` in every consumer of this process (idempotent); raises
    FaustCompatError, before changing anything, when check() fails."""
    check()
    _replaced.setdefault(NAME, faust_method())
    faust_consumer.Consumer._new_offset = new_offset  # type: ignore[method-assign]

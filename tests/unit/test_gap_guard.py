"""GapGuard: offsets that never reached the stream are re-read, never silently skipped."""

from __future__ import annotations

from streams.agents.gaps import GapGuard, Verdict

P, S = Verdict.PROCESS, Verdict.SEEK


def feed(guard: GapGuard[str], offsets: list[int], part: str = "p0") -> list[Verdict]:
    return [guard.admit(part, o) for o in offsets]


def test_contiguous_offsets_and_replays_are_processed() -> None:
    g: GapGuard[str] = GapGuard()
    assert feed(g, [5, 6, 7]) == [P, P, P]
    # A rewind (faust re-seeks to the committed offset) is a replay, not a gap.
    assert feed(g, [3, 4, 5, 6, 7, 8]) == [P] * 6
    assert g.gaps_detected == 0


def test_gap_asks_to_seek_back_and_drops_until_the_missing_offset_arrives() -> None:
    g: GapGuard[str] = GapGuard()
    feed(g, [0, 1, 2])
    assert feed(g, [9, 10]) == [S, S]  # 3..8 never arrived
    assert g.seek_target("p0") == 3
    # Records fetched before the seek keep coming; still not processed.
    assert feed(g, [11, 12]) == [S, S]
    # The re-read reaches the gap: everything from 3 on is processed, in order.
    assert g.healing("p0")
    assert feed(g, [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]) == [P] * 11
    assert not g.healing("p0")
    assert (g.gaps_detected, g.gaps_accepted) == (1, 0)


def test_partitions_are_independent() -> None:
    g: GapGuard[str] = GapGuard()
    feed(g, [0, 1], "a")
    feed(g, [0, 1], "b")
    assert g.admit("a", 5) is S
    assert feed(g, [2, 3], "b") == [P, P]


def test_a_gap_that_survives_many_re_reads_is_accepted() -> None:
    g: GapGuard[str] = GapGuard(max_seeks=3)
    feed(g, [0, 1])
    assert g.admit("p0", 7) is S
    g.seek_target("p0")  # one seek per batch: 1
    assert g.admit("p0", 7) is S
    g.seek_target("p0")  # 2
    assert g.admit("p0", 7) is S
    g.seek_target("p0")  # 3 = max_seeks: offsets 2..6 are not on the broker (compacted)
    assert g.admit("p0", 7) is P
    assert g.gaps_accepted == 1
    assert g.admit("p0", 8) is P


def test_reset_forgets_expectations() -> None:
    g: GapGuard[str] = GapGuard()
    feed(g, [0, 1])
    g.reset()
    assert g.admit("p0", 50) is P

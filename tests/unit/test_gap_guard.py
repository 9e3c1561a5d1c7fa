"""GapGuard and GapFiller: skipped offsets are read back from the broker, holes cost little."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from streams.input.gaps import Gap, GapFiller, GapGuard, GapHealer, GapReadError
from streams.metrics import AgentMetrics


def feed(guard: GapGuard[str], offsets: list[int], part: str = "p0") -> list[Gap[str] | None]:
    return [guard.admit(part, o) for o in offsets]


def test_contiguous_offsets_and_replays_are_no_gaps() -> None:
    g: GapGuard[str] = GapGuard()
    assert feed(g, [5, 6, 7]) == [None] * 3
    # A rewind (faust re-seeks to the committed offset) is a replay, not a gap.
    assert feed(g, [3, 4, 5, 6, 7, 8]) == [None] * 6
    assert g.gaps_detected == 0


def test_a_jump_names_the_skipped_offsets_once() -> None:
    g: GapGuard[str] = GapGuard()
    feed(g, [0, 1, 2])
    assert feed(g, [9, 10]) == [Gap("p0", 3, 9), None]  # 3..8 never arrived
    assert g.gaps_detected == 1


def test_partitions_are_independent() -> None:
    g: GapGuard[str] = GapGuard()
    feed(g, [0, 1], "a")
    feed(g, [0, 1], "b")
    assert g.admit("a", 5) == Gap("a", 2, 5)
    assert feed(g, [2, 3], "b") == [None, None]


def test_the_committed_offset_is_the_first_expectation() -> None:
    g: GapGuard[str] = GapGuard()
    g.expect("p0", 40)
    assert g.admit("p0", 65) == Gap("p0", 40, 65)
    g.expect("p0", 10)  # only before the first record of the partition
    assert g.admit("p0", 66) is None
    g.expect("p1", None)
    assert g.admit("p1", 7) is None


def test_reset_forgets_expectations() -> None:
    g: GapGuard[str] = GapGuard()
    feed(g, [0, 1])
    g.reset()
    assert g.admit("p0", 50) is None


class FakeLog:
    """A partition on a fake broker: the offsets that hold a record; a read returns up to
    ``fetch_size`` offsets' worth from the start, and at least up to ``end``."""

    def __init__(self, offsets: Sequence[int], fetch_size: int = 100) -> None:
        self.offsets = sorted(offsets)
        self.fetch_size = fetch_size
        self.reads: list[tuple[int, int]] = []

    async def fetch(self, partition: str, start: int, end: int) -> tuple[list[int], int]:
        self.reads.append((start, end))
        stop = max(end, start + self.fetch_size)
        return [o for o in self.offsets if start <= o < stop], stop


def filler(log: FakeLog) -> GapFiller[str, int]:
    return GapFiller(log.fetch, lambda r: r)


async def test_lost_records_are_read_from_the_broker() -> None:
    log = FakeLog(range(200))
    f = filler(log)
    assert await f.missing(Gap("p0", 40, 68)) == list(range(40, 68))
    assert log.reads == [(40, 68)] and f.reads == 1


async def test_transaction_markers_cost_one_read_for_many_holes() -> None:
    # A commit marker after every 8 records: offsets 8, 17, 26, ... hold no record.
    markers = set(range(8, 1000, 9))
    log = FakeLog([o for o in range(1000) if o not in markers], fetch_size=200)
    f = filler(log)
    holes = [m for m in sorted(markers) if m < 190]
    for m in holes:
        assert await f.missing(Gap("p0", m, m + 1)) == []
    assert len(holes) == 21 and f.reads == 1
    # Past what the read showed: one more read, not one per hole.
    assert await f.missing(Gap("p0", 215, 216)) == []
    assert f.reads == 2


async def test_a_gap_with_records_inside_a_known_window_is_read_again() -> None:
    log = FakeLog([o for o in range(300) if o != 10])
    f = filler(log)
    assert await f.missing(Gap("p0", 10, 11)) == []
    # 20..29 hold records (the window knows it); they were lost, so they are read.
    assert await f.missing(Gap("p0", 20, 30)) == list(range(20, 30))
    assert f.reads == 2


async def test_windows_are_per_partition_and_reset_forgets_them() -> None:
    log = FakeLog([o for o in range(300) if o % 10])
    f = filler(log)
    assert await f.missing(Gap("a", 10, 11)) == []
    assert await f.missing(Gap("b", 20, 21)) == []
    assert f.reads == 2
    assert await f.missing(Gap("a", 30, 31)) == []
    assert f.reads == 2
    f.reset()
    assert await f.missing(Gap("a", 40, 41)) == []
    assert f.reads == 3


async def test_a_read_that_stops_short_is_an_error() -> None:
    async def short(partition: str, start: int, end: int) -> tuple[list[int], int]:
        return [], end - 1

    with pytest.raises(GapReadError):
        await GapFiller(short, lambda r: r).missing(Gap("p0", 5, 9))


class Msg:
    def __init__(self, offset: int, tp: str = "p0") -> None:
        self.tp = tp
        self.topic = "in"
        self.partition = 0
        self.offset = offset
        self.key = None
        self.value = b"{}"
        self.headers: list[tuple[str, bytes]] = []


class Event:
    def __init__(self, message: Msg) -> None:
        self.message = message


class Consumer:
    def __init__(self) -> None:
        self._committed_offset: dict[str, int] = {}

    def _to_message(self, tp: str, record: Rec) -> Msg:
        return Msg(record.offset, tp)


class App:
    consumer_generation_id = 1

    def __init__(self) -> None:
        self.consumer = Consumer()

    def create_event(self, key: object, value: object, headers: object, message: Msg) -> Event:
        return Event(message)


class Rec:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class Reader:
    def __init__(self, log: FakeLog, failures: int) -> None:
        self.log = log
        self.failures = failures

    async def fetch(self, partition: str, start: int, end: int) -> tuple[list[Rec], int]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker away")
        offsets, position = await self.log.fetch(partition, start, end)
        return [Rec(o) for o in offsets], position

    async def close(self) -> None:
        pass


def healer(
    reader: Reader,
    sleep: Callable[[float], Awaitable[None]],
    registry: CollectorRegistry,
    committed: int | None = 3,
) -> GapHealer:
    app = App()
    if committed is not None:
        app.consumer._committed_offset["p0"] = committed
    return GapHealer(
        cast(Any, app),
        GapGuard(),
        metrics=AgentMetrics(registry),
        label="in",
        sleep=sleep,
        reader=cast(Any, reader),
    )


async def test_healer_puts_read_records_ahead_and_retries_a_failed_read() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    registry = CollectorRegistry()
    h = healer(Reader(FakeLog([o for o in range(50) if o != 7]), failures=2), sleep, registry)
    h.new_batch()
    # The committed offset is 3: the first record delivered is 6, so 3..5 were lost.
    out = await h.admit(cast(Any, Event(Msg(6))))
    assert [e.message.offset for e in out] == [3, 4, 5, 6]
    assert slept == [0.2, 0.4]
    assert [e.message.offset for e in await h.admit(cast(Any, Event(Msg(8))))] == [8]
    sample = registry.get_sample_value
    assert sample("reminders_stream_input_gaps_total", {"topic": "in"}) == 1
    assert sample("reminders_stream_input_offset_holes_total", {"topic": "in"}) == 1
    assert sample("reminders_stream_input_gap_reads_total", {"topic": "in"}) == 1


async def test_a_bug_in_the_read_is_not_retried_forever() -> None:
    class Broken(Reader):
        async def fetch(self, partition: str, start: int, end: int) -> tuple[list[Rec], int]:
            raise ValueError("bug")

    async def sleep(seconds: float) -> None:
        raise AssertionError("no retry expected")

    h = healer(Broken(FakeLog([]), failures=0), sleep, CollectorRegistry())
    h.new_batch()
    with pytest.raises(ValueError):
        await h.admit(cast(Any, Event(Msg(6))))


async def test_with_nothing_committed_the_first_record_lost_at_a_takeover_is_read() -> None:
    # A partition nobody committed on starts at its beginning: a first record that never
    # reached the stream (offset 0 here) must be read, not skipped for good.
    async def sleep(seconds: float) -> None:
        raise AssertionError("no retry expected")

    h = healer(Reader(FakeLog(list(range(10))), failures=0), sleep, CollectorRegistry(), None)
    h.new_batch()
    assert [e.message.offset for e in await h.admit(cast(Any, Event(Msg(1))))] == [0, 1]


async def test_a_tail_the_stream_never_delivered_is_read_up_to_the_high_watermark() -> None:
    async def sleep(seconds: float) -> None:
        raise AssertionError("no retry expected")

    registry = CollectorRegistry()
    h = healer(Reader(FakeLog(list(range(10))), failures=0), sleep, registry, None)
    h.new_batch()
    assert [e.message.offset for e in await h.admit(cast(Any, Event(Msg(0))))] == [0]
    assert h.expected("p0") == 1
    # The broker holds 1..3 (high watermark 4) but the stream delivers nothing more.
    assert [e.message.offset for e in await h.tail("p0", 4)] == [1, 2, 3]
    assert h.expected("p0") == 4 and await h.tail("p0", 4) == []
    assert registry.get_sample_value("reminders_stream_input_gaps_total", {"topic": "in"}) == 1

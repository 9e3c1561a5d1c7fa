"""How bench/expiry_parts.py shapes a run's chunks."""

import uuid

from bench.expiry_parts import run_chunks
from streams.slices.profile.owners import OWNERS_PER_TRANSACTION


def test_run_chunks_sort_each_batch_and_cut_it_into_transactions() -> None:
    owners = [uuid.uuid4() for _ in range(2 * 1_200 + 300)]
    chunks = run_chunks(owners, 1_200, windows=(1, 1))  # the scan's order, unsorted
    size = OWNERS_PER_TRANSACTION
    # Every owner once, in the same batches, each batch sorted, no chunk across two batches.
    assert [o for c in chunks for o in c] == [
        *sorted(owners[:1_200]),
        *sorted(owners[1_200:2_400]),
        *sorted(owners[2_400:]),
    ]
    assert [len(c) for c in chunks] == [size, size, 200, size, size, 200, 300]


def test_a_batch_smaller_than_a_transaction_is_one_chunk() -> None:
    owners = [uuid.uuid4() for _ in range(3)]
    assert run_chunks(owners, 10) == [sorted(owners)]


def test_run_chunks_hand_owners_out_sorted_a_window_at_a_time_as_the_fan_out_does() -> None:
    owners = [uuid.uuid4() for _ in range(4_000)]
    # Windows of 1,000, then 2,000 (the most), then the 1,000 left: each sorted, in turn;
    # then the worker's batches of 1,200 out of that order, each sorted again.
    handed = [*sorted(owners[:1_000]), *sorted(owners[1_000:3_000]), *sorted(owners[3_000:])]
    chunks = run_chunks(owners, 1_200, windows=(1_000, 2_000))
    assert [o for c in chunks for o in c] == [
        o for i in range(0, 4_000, 1_200) for o in sorted(handed[i : i + 1_200])
    ]
